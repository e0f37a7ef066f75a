package node

import "context"

// originKey is the context key of the node a request's client is connected to.
type originKey struct{}

// WithOrigin marks requests run with ctx as asked through the node with ID id ("": a node that
// did not say): a follower's forwarding link runs its clients' requests on the leader with the
// follower's ID, so that the locks they take say which node their client is on (LOCKS,
// LOCKWAITERS).
func WithOrigin(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, originKey{}, id)
}

// OriginOf is the node WithOrigin marked ctx with; ok is false for a request of this node's own
// client.
func OriginOf(ctx context.Context) (id string, ok bool) {
	id, ok = ctx.Value(originKey{}).(string)
	return id, ok
}

// Package clients is raftlock's client-library compatibility matrix for Go: go-redis, redsync,
// redislock and rueidislock run their lock flows against the servers named in RAFTLOCK_ADDRS.
package clients

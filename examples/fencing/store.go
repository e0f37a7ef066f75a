package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/raftlock/raftlock/examples/fencing/filestore"
	"github.com/raftlock/raftlock/examples/fencing/httpstore"
)

// errStale is a store's refusal of a write whose token is older than one it has accepted.
var errStale = errors.New("stale fencing token")

// staleError is a store's own refusal, which is errStale too.
type staleError struct{ err error }

func (e staleError) Error() string        { return e.err.Error() }
func (e staleError) Unwrap() error        { return e.err }
func (e staleError) Is(target error) bool { return target == errStale }

// store is the fenced resource, as each worker sees it.
type store interface {
	// write sets the value if token is at least the largest token accepted so far; otherwise it
	// returns an error that wraps errStale.
	write(ctx context.Context, token int64, value string) error
	// read returns the value and the token of the write that set it.
	read(ctx context.Context) (string, int64, error)
	close()
}

// pgStore is a row of a PostgreSQL table. The fence is the UPDATE's WHERE: the row changes only
// if its token is not above the writer's, in one statement, so no other write comes between the
// check and the change (the row lock of the UPDATE orders them).
type pgStore struct {
	conn *pgx.Conn
	id   string
}

const pgTable = `CREATE TABLE IF NOT EXISTS fencing_example (
	id    text PRIMARY KEY,
	value text NOT NULL,
	token bigint NOT NULL
)`

func openPG(ctx context.Context, dsn, id string) (*pgStore, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return &pgStore{conn: conn, id: id}, nil
}

// reset creates the table if missing and sets the row to "initial", token 0. A demo's reset: a
// real table never lowers a row's token.
func (s *pgStore) reset(ctx context.Context) error {
	if _, err := s.conn.Exec(ctx, pgTable); err != nil {
		return fmt.Errorf("create table: %w", err)
	}
	_, err := s.conn.Exec(ctx, `INSERT INTO fencing_example (id, value, token) VALUES ($1, 'initial', 0)
		ON CONFLICT (id) DO UPDATE SET value = 'initial', token = 0`, s.id)
	if err != nil {
		return fmt.Errorf("reset row: %w", err)
	}
	return nil
}

func (s *pgStore) write(ctx context.Context, token int64, value string) error {
	tag, err := s.conn.Exec(ctx,
		`UPDATE fencing_example SET value = $2, token = $3 WHERE id = $1 AND token <= $3`,
		s.id, value, token)
	if err != nil {
		return fmt.Errorf("update: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return staleError{fmt.Errorf("UPDATE ... WHERE token <= %d matched no row: the row holds a larger token", token)}
	}
	return nil
}

func (s *pgStore) read(ctx context.Context) (string, int64, error) {
	var value string
	var token int64
	err := s.conn.QueryRow(ctx, `SELECT value, token FROM fencing_example WHERE id = $1`, s.id).Scan(&value, &token)
	return value, token, err
}

func (s *pgStore) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.conn.Close(ctx)
}

// fileStore is a file of a filestore.Store.
type fileStore struct {
	fs   *filestore.Store
	name string
}

func (s fileStore) write(_ context.Context, token int64, value string) error {
	err := s.fs.Write(s.name, uint64(token), []byte(value))
	if errors.Is(err, filestore.ErrStale) {
		return staleError{err}
	}
	return err
}

func (s fileStore) read(context.Context) (string, int64, error) {
	data, token, err := s.fs.Read(s.name)
	return string(data), int64(token), err
}

func (fileStore) close() {}

// httpStore is a resource of an httpstore service.
type httpStore struct {
	hc   *http.Client
	base string
	name string
}

func (s httpStore) write(ctx context.Context, token int64, value string) error {
	err := httpstore.Put(ctx, s.hc, s.base, s.name, uint64(token), []byte(value))
	if errors.Is(err, httpstore.ErrStale) {
		return staleError{err}
	}
	return err
}

func (s httpStore) read(ctx context.Context) (string, int64, error) {
	value, token, err := httpstore.Get(ctx, s.hc, s.base, s.name)
	return string(value), int64(token), err
}

func (httpStore) close() {}

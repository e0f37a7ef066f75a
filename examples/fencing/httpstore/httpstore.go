// Package httpstore is the fencing recipe for an HTTP service: it keeps, per resource, the
// largest fencing token it has accepted, and refuses a write that carries a smaller one with
// 409 Conflict. The token travels in the Fencing-Token header; a write without one is refused
// with 428 Precondition Required.
//
//	PUT /resources/{name}   Fencing-Token: 42   body: the new value  -> 204, or 409 when stale
//	GET /resources/{name}                                            -> 200 the value, Fencing-Token: the largest token
package httpstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
)

// TokenHeader carries the writer's fencing token in a PUT, and the largest accepted one in a
// GET's reply.
const TokenHeader = "Fencing-Token"

// maxBody bounds a value.
const maxBody = 1 << 20

// ErrStale means the service refused the write: it has accepted a larger token.
var ErrStale = errors.New("httpstore: stale fencing token")

// Server is the service: an http.Handler over an in-memory map of resources.
type Server struct {
	mux *http.ServeMux
	mu  struct {
		sync.Mutex
		resources map[string]resource
	}
}

type resource struct {
	value []byte
	token uint64
}

// NewServer returns an empty service.
func NewServer() *Server {
	s := &Server{mux: http.NewServeMux()}
	s.mu.resources = make(map[string]resource)
	s.mux.HandleFunc("PUT /resources/{name}", s.put)
	s.mux.HandleFunc("GET /resources/{name}", s.get)
	return s
}

// ServeHTTP serves the service's routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) put(w http.ResponseWriter, r *http.Request) {
	h := r.Header.Get(TokenHeader)
	if h == "" {
		http.Error(w, "a write needs a "+TokenHeader+" header", http.StatusPreconditionRequired)
		return
	}
	token, err := strconv.ParseUint(h, 10, 64)
	if err != nil {
		http.Error(w, "bad "+TokenHeader+" header", http.StatusBadRequest)
		return
	}
	value, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	name := r.PathValue("name")
	s.mu.Lock()
	cur := s.mu.resources[name]
	stale := token < cur.token
	if !stale {
		s.mu.resources[name] = resource{value: value, token: token}
	}
	s.mu.Unlock()
	if stale {
		w.Header().Set(TokenHeader, strconv.FormatUint(cur.token, 10))
		http.Error(w, fmt.Sprintf("%s has accepted %d", name, cur.token), http.StatusConflict)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	cur, ok := s.mu.resources[r.PathValue("name")]
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set(TokenHeader, strconv.FormatUint(cur.token, 10))
	w.Write(cur.value)
}

// Put writes value to the resource name of the service at base (http://host:port) with token;
// a refusal as stale returns an error that wraps ErrStale.
func Put(ctx context.Context, hc *http.Client, base, name string, token uint64, value []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/resources/"+url.PathEscape(name), bytes.NewReader(value))
	if err != nil {
		return err
	}
	req.Header.Set(TokenHeader, strconv.FormatUint(token, 10))
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(res.Body, 1024))
	switch res.StatusCode {
	case http.StatusNoContent, http.StatusOK:
		return nil
	case http.StatusConflict:
		return fmt.Errorf("%w %d: %s", ErrStale, token, bytes.TrimSpace(msg))
	default:
		return fmt.Errorf("httpstore: PUT %s: %s: %s", name, res.Status, bytes.TrimSpace(msg))
	}
}

// Get reads the resource name and the largest token it has accepted.
func Get(ctx context.Context, hc *http.Client, base, name string) ([]byte, uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/resources/"+url.PathEscape(name), nil)
	if err != nil {
		return nil, 0, err
	}
	res, err := hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer res.Body.Close()
	value, err := io.ReadAll(io.LimitReader(res.Body, maxBody))
	if err != nil {
		return nil, 0, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("httpstore: GET %s: %s", name, res.Status)
	}
	token, err := strconv.ParseUint(res.Header.Get(TokenHeader), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("httpstore: GET %s: bad %s header: %w", name, TokenHeader, err)
	}
	return value, token, nil
}

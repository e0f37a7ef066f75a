package httpstore

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestPutRefusesStaleTokens(t *testing.T) {
	srv := httptest.NewServer(NewServer())
	t.Cleanup(srv.Close)
	hc := srv.Client()
	ctx := t.Context()
	steps := []struct {
		name    string
		token   uint64
		value   string
		stale   bool
		content string // the resource's value after the step
	}{
		{name: "report", token: 5, value: "from 5", content: "from 5"},
		{name: "report", token: 3, value: "from 3", stale: true, content: "from 5"},
		{name: "report", token: 5, value: "from 5 again", content: "from 5 again"},
		{name: "report", token: 9, value: "from 9", content: "from 9"},
		{name: "report", token: 5, value: "from 5, late", stale: true, content: "from 9"},
		{name: "other", token: 1, value: "tokens are per resource", content: "tokens are per resource"},
	}
	for i, st := range steps {
		err := Put(ctx, hc, srv.URL, st.name, st.token, []byte(st.value))
		if got := errors.Is(err, ErrStale); got != st.stale || (err != nil && !got) {
			t.Fatalf("step %d: Put(%d): %v; want stale=%v", i, st.token, err, st.stale)
		}
		value, _, err := Get(ctx, hc, srv.URL, st.name)
		if err != nil || string(value) != st.content {
			t.Fatalf("step %d: Get: %q, %v; want %q", i, value, err, st.content)
		}
	}
	if _, token, err := Get(ctx, hc, srv.URL, "report"); err != nil || token != 9 {
		t.Errorf("largest token: %d, %v; want 9", token, err)
	}
}

func TestPutWithoutToken(t *testing.T) {
	srv := httptest.NewServer(NewServer())
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		header string
		want   int
	}{
		{"", http.StatusPreconditionRequired},
		{"x", http.StatusBadRequest},
		{"-1", http.StatusBadRequest},
	} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL+"/resources/r", strings.NewReader("v"))
		if err != nil {
			t.Fatal(err)
		}
		if tc.header != "" {
			req.Header.Set(TokenHeader, tc.header)
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tc.want {
			t.Errorf("PUT with %s %q: %d; want %d", TokenHeader, tc.header, res.StatusCode, tc.want)
		}
	}
}

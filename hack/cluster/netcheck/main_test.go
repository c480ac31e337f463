package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestIdentityNamesTheCaller(t *testing.T) {
	srv := httptest.NewServer(handler(Identity{Pod: "a", Node: "node-a"}))
	defer srv.Close()
	code, body := get(t, srv.URL+"/")
	var id Identity
	if err := json.Unmarshal([]byte(body), &id); code != http.StatusOK || err != nil {
		t.Fatalf("GET /: %d %q (%v)", code, body, err)
	}
	if id.Pod != "a" || id.Node != "node-a" || id.From != "127.0.0.1" {
		t.Errorf("GET / = %+v, want pod a on node-a, from 127.0.0.1", id)
	}
}

func TestFetchRelaysWhatTheTargetAnswered(t *testing.T) {
	target := httptest.NewServer(handler(Identity{Pod: "b", Node: "node-b"}))
	defer target.Close()
	asker := httptest.NewServer(handler(Identity{Pod: "a", Node: "node-a"}))
	defer asker.Close()

	code, body := get(t, asker.URL+"/fetch?url="+url.QueryEscape(target.URL+"/"))
	var id Identity
	if err := json.Unmarshal([]byte(body), &id); code != http.StatusOK || err != nil {
		t.Fatalf("fetch: %d %q (%v)", code, body, err)
	}
	if id.Pod != "b" || id.Node != "node-b" {
		t.Errorf("fetch answered %+v, want pod b on node-b", id)
	}
}

func TestFetchSaysWhyNot(t *testing.T) {
	asker := httptest.NewServer(handler(Identity{Pod: "a"}))
	defer asker.Close()
	// A port nobody listens on: closed at once, refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String() + "/"
	l.Close()
	for _, tc := range []struct {
		target string
		code   int
		says   string
	}{
		{closed, http.StatusBadGateway, "from pod a"},
		{asker.URL + "/missing", http.StatusBadGateway, "404"},
		{"file:///etc/passwd", http.StatusBadRequest, "absolute http:// URL"},
		{"", http.StatusBadRequest, "absolute http:// URL"},
	} {
		code, body := get(t, asker.URL+"/fetch?url="+url.QueryEscape(tc.target))
		if code != tc.code || !strings.Contains(body, tc.says) {
			t.Errorf("fetch %q: %d %q, want %d saying %q", tc.target, code, body, tc.code, tc.says)
		}
	}
}

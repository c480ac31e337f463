package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The upstream's health follows UPSTREAM_HEALTH and then the control endpoint, and the
// endpoint refuses a word it does not know, keeping the health it had.
func TestUpstreamOnCommand(t *testing.T) {
	if _, err := newUpstream("sideways"); err == nil {
		t.Error("newUpstream accepted the health \"sideways\"")
	}
	u, err := newUpstream("up")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	control := httptest.NewServer(u.control())
	defer control.Close()

	status := func() int {
		t.Helper()
		resp, err := http.Get(u.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	put := func(body string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, control.URL+"/upstream", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status(); got != http.StatusOK {
		t.Errorf("upstream started up answers %d", got)
	}
	if got := put("down\n"); got != http.StatusOK {
		t.Errorf("PUT down: %d", got)
	}
	if got := status(); got != http.StatusServiceUnavailable {
		t.Errorf("upstream held down answers %d", got)
	}
	if got := put("sideways"); got != http.StatusBadRequest {
		t.Errorf("PUT sideways: %d, want 400", got)
	}
	if got := status(); got != http.StatusServiceUnavailable {
		t.Errorf("after a refused command the upstream answers %d, want it still down", got)
	}
	if got := put("up"); got != http.StatusOK || status() != http.StatusOK {
		t.Error("PUT up did not bring the upstream back")
	}
}

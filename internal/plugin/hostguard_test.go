package plugin

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A page from another site that rebinds its name to 127.0.0.1 reaches the
// dashboard's port, but its requests name that site in Host: refused, and
// the answer says why and where to go instead.
func TestDashboardRefusesForeignHost(t *testing.T) {
	srv := httptest.NewServer(nil)
	defer srv.Close()
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = onlyLoopbackHost(port, newHub("shop", nil).handler())

	for _, tc := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:" + port, http.StatusOK},
		{"localhost:" + port, http.StatusOK},
		{"LOCALHOST:" + port, http.StatusOK},
		{"[::1]:" + port, http.StatusOK},
		{"evil.example:" + port, http.StatusForbidden},
		{"evil.example", http.StatusForbidden},
		{"127.0.0.1", http.StatusForbidden},          // port 80, not the dashboard's
		{"127.0.0.1:1" + port, http.StatusForbidden}, // another port
		{"127.0.0.2:" + port, http.StatusForbidden},  // loopback, but not a name the dashboard gives
		{"localhost.:" + port, http.StatusForbidden}, // a name DNS can answer for
		{"0.0.0.0:" + port, http.StatusForbidden},
	} {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tc.host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("Host %q: %v", tc.host, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("Host %q: status %d, want %d", tc.host, resp.StatusCode, tc.want)
			continue
		}
		if tc.want == http.StatusForbidden {
			for _, say := range []string{"answers only to localhost, 127.0.0.1 and [::1] on port " + port, "DNS-rebinding", "http://127.0.0.1:" + port + "/"} {
				if !strings.Contains(string(body), say) {
					t.Errorf("Host %q: the refusal does not say %q: %s", tc.host, say, body)
				}
			}
		}
	}
}

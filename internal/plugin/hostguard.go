package plugin

import (
	"fmt"
	"net"
	"net/http"
	"strings"
)

// loopbackNames are the only names the dashboard answers to.
var loopbackNames = map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true}

// onlyLoopbackHost refuses a request whose Host header is not localhost,
// 127.0.0.1 or [::1] with the port the dashboard listens on. Listening on
// 127.0.0.1 keeps other machines out, but not other web pages: a page on
// another site can point its own name at 127.0.0.1 (DNS rebinding), and the
// browser then lets its script read this server, and so the cluster with the
// user's credentials, as the same origin. Such a request still names the
// other site in Host, which is what this checks (kubectl proxy's
// --accept-hosts guards its port the same way).
func onlyLoopbackHost(port string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host, port) {
			http.Error(w, fmt.Sprintf(
				"Forbidden: the Fusebox dashboard answers only to localhost, 127.0.0.1 and [::1] on port %s, and this request was addressed to %q.\n"+
					"A page reaching it under another name may be a DNS-rebinding attack; open http://127.0.0.1:%s/ instead.\n",
				port, r.Host, port), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost says whether host (a Host header) names this server on the
// loopback interface at port.
func loopbackHost(host, port string) bool {
	name, p, err := net.SplitHostPort(host)
	if err != nil {
		// No port: the scheme's default, 80.
		name, p = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), "80"
	}
	return loopbackNames[strings.ToLower(name)] && p == port
}

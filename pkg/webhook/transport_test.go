package webhook

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// servingCertDir writes a self-signed serving certificate for 127.0.0.1 into a new
// directory, as the webhook server finds one in its CertDir.
func servingCertDir(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "webhook"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startWebhookServer runs the server NewServer builds for o on a free port of 127.0.0.1
// and returns its address once it accepts connections.
func startWebhookServer(t *testing.T, o Options) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	o.Host, o.Port, o.CertDir = "127.0.0.1", port, servingCertDir(t)
	srv := o.NewServer()
	srv.Register("/ping", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("pong")) }))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("webhook server: %v", err)
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhook server not listening on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// negotiate completes a TLS handshake with the server as a client configured by c.
func negotiate(addr string, c *tls.Config) (tls.ConnectionState, error) {
	c.InsecureSkipVerify = true //nolint:gosec // the test's own self-signed server; only the transport is judged
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, c)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer conn.Close()
	return conn.ConnectionState(), nil
}

// The webhook server speaks HTTP/1.1 only unless --enable-http2, as the Kubernetes
// operator scaffolds do since the HTTP/2 rapid-reset attacks, and no TLS below 1.2.
func TestWebhookServerTransport(t *testing.T) {
	t.Run("a client offering h2 gets http/1.1", func(t *testing.T) {
		addr := startWebhookServer(t, DefaultOptions())
		st, err := negotiate(addr, &tls.Config{NextProtos: []string{"h2", "http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		if st.NegotiatedProtocol != "http/1.1" {
			t.Errorf("negotiated %q, want http/1.1", st.NegotiatedProtocol)
		}
		// And it serves over that.
		hc := &http.Client{Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as above
			ForceAttemptHTTP2: true,
		}}
		resp, err := hc.Get("https://" + addr + "/ping")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.ProtoMajor != 1 {
			t.Errorf("served over %s, want HTTP/1.1", resp.Proto)
		}
	})
	t.Run("a client offering only h2 is refused", func(t *testing.T) {
		addr := startWebhookServer(t, DefaultOptions())
		if st, err := negotiate(addr, &tls.Config{NextProtos: []string{"h2"}}); err == nil {
			t.Errorf("handshake offering only h2 succeeded (negotiated %q)", st.NegotiatedProtocol)
		}
	})
	t.Run("a TLS 1.1 client is refused", func(t *testing.T) {
		addr := startWebhookServer(t, DefaultOptions())
		_, err := negotiate(addr, &tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}) //nolint:gosec // the old client under test
		if err == nil {
			t.Fatal("TLS 1.1 handshake succeeded")
		}
		if _, err := negotiate(addr, &tls.Config{MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12}); err != nil {
			t.Errorf("TLS 1.2 handshake refused: %v", err)
		}
	})
	t.Run("--enable-http2 turns h2 back on", func(t *testing.T) {
		o := DefaultOptions()
		o.EnableHTTP2 = true
		addr := startWebhookServer(t, o)
		st, err := negotiate(addr, &tls.Config{NextProtos: []string{"h2", "http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		if st.NegotiatedProtocol != "h2" {
			t.Errorf("negotiated %q with --enable-http2, want h2", st.NegotiatedProtocol)
		}
	})
}

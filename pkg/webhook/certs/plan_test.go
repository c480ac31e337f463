package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func testPolicy() policy {
	return policy{
		names:            parseSANs(append(ServiceDNSNames("fusebox-webhook-service", "fusebox-system"), "127.0.0.1")),
		caValidity:       30 * time.Hour,
		certValidity:     9 * time.Hour,
		propagationDelay: time.Hour,
	}
}

// plan plans at now and round-trips the result through the Secret's encoding,
// as the Rotator's next look would see it.
func plan(t *testing.T, p policy, cur bundle, now time.Time) (bundle, []string, time.Time) {
	t.Helper()
	next, why, wake, err := p.plan(cur, now)
	if err != nil {
		t.Fatal(err)
	}
	if !wake.After(now) {
		t.Fatalf("plan at %s wakes at %s: not in the future", now, wake)
	}
	stored := parseBundle(next.data())
	if !sameData(stored.data(), next.data()) {
		t.Fatal("bundle does not survive its own encoding")
	}
	return stored, why, wake
}

func serial(kp *keyPair) string { return kp.cert.SerialNumber.String() }

// verify checks that b's serving certificate is trusted through b's caBundle
// for the Service name and the IP, at now.
func verify(t *testing.T, b bundle, now time.Time) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b.caBundle()) {
		t.Fatal("caBundle holds no certificate")
	}
	for _, name := range []string{"fusebox-webhook-service.fusebox-system.svc", "127.0.0.1"} {
		if _, err := b.leaf.cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: now}); err != nil {
			t.Errorf("serving certificate not trusted for %s at %s: %v", name, now, err)
		}
	}
}

func TestFirstIssue(t *testing.T) {
	p := testPolicy()
	b, why, wake := plan(t, p, bundle{}, t0)
	if len(b.cas) != 1 || b.leaf == nil || len(why) != 2 {
		t.Fatalf("cas %d leaf %v why %q", len(b.cas), b.leaf != nil, why)
	}
	ca, leaf := b.cas[0].cert, b.leaf.cert
	if !ca.IsCA || !ca.NotAfter.Equal(t0.Add(30*time.Hour)) || !leaf.NotAfter.Equal(t0.Add(9*time.Hour)) || leaf.IsCA {
		t.Errorf("CA until %s, leaf until %s", ca.NotAfter, leaf.NotAfter)
	}
	for _, c := range []*x509.Certificate{ca, leaf} {
		k, ok := c.PublicKey.(*ecdsa.PublicKey)
		if !ok || k.Curve != elliptic.P256() {
			t.Errorf("%s: key %T, want ECDSA P-256", c.Subject, c.PublicKey)
		}
	}
	if strings.Join(leaf.DNSNames, ",") != "fusebox-webhook-service,fusebox-webhook-service.fusebox-system,fusebox-webhook-service.fusebox-system.svc,fusebox-webhook-service.fusebox-system.svc.cluster.local" ||
		len(leaf.IPAddresses) != 1 || len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("leaf names %v %v, usage %v", leaf.DNSNames, leaf.IPAddresses, leaf.ExtKeyUsage)
	}
	verify(t, b, t0)
	if want := t0.Add(6 * time.Hour); !wake.Equal(want) {
		t.Errorf("wake %s, want %s (two thirds of the leaf's 9h)", wake, want)
	}
	if err := b.usable(t0); err != nil {
		t.Error(err)
	}
}

func TestNothingToDoBeforeRenewal(t *testing.T) {
	p := testPolicy()
	b, _, wake := plan(t, p, bundle{}, t0)
	next, why, wake2 := plan(t, p, b, wake.Add(-time.Second))
	if len(why) != 0 || !sameData(b.data(), next.data()) || !wake2.Equal(wake) {
		t.Errorf("changed before renewal: %q", why)
	}
}

func TestLeafRenewsAtTwoThirds(t *testing.T) {
	p := testPolicy()
	b, _, wake := plan(t, p, bundle{}, t0)
	next, why, _ := plan(t, p, b, wake)
	if len(why) != 1 || why[0] != "the serving certificate is due for renewal" || serial(next.leaf) == serial(b.leaf) {
		t.Errorf("why %q, same serial %v", why, serial(next.leaf) == serial(b.leaf))
	}
	if len(next.cas) != 1 || serial(&next.cas[0]) != serial(&b.cas[0]) {
		t.Error("the CA changed with the leaf")
	}
	verify(t, next, wake)
}

// The CA's renewal: the new CA is trusted at once but signs only after the
// propagation delay; the old one stays trusted until it expires.
func TestCARotation(t *testing.T) {
	p := testPolicy()
	b, _, _ := plan(t, p, bundle{}, t0)
	oldCA := serial(&b.cas[0])
	now := t0
	// Follow the wake-ups until the CA renews (at 20h).
	for i := 0; len(b.cas) == 1; i++ {
		var wake time.Time
		b, _, wake = plan(t, p, b, now)
		verify(t, b, now)
		if i > 10 {
			t.Fatal("the CA never renewed")
		}
		if len(b.cas) == 1 {
			now = wake
		}
	}
	if want := t0.Add(20 * time.Hour); !now.Equal(want) {
		t.Errorf("CA renewed at %s, want %s", now, want)
	}
	if serial(&b.cas[1]) != oldCA || b.leaf.cert.CheckSignatureFrom(b.cas[1].cert) != nil {
		t.Fatal("right after the CA renewal, the serving certificate must still be the old CA's")
	}
	_, _, wake := plan(t, p, b, now)
	if want := now.Add(time.Hour); !wake.Equal(want) {
		t.Errorf("wake %s, want the end of the propagation delay %s", wake, want)
	}
	now = wake
	b, why, _ := plan(t, p, b, now)
	if len(b.cas) != 2 || b.leaf.cert.CheckSignatureFrom(b.cas[0].cert) != nil {
		t.Fatalf("after the propagation delay: why %q, cas %d: want a leaf of the new CA", why, len(b.cas))
	}
	verify(t, b, now)
	// The old CA goes when it expires (30h), not before.
	b, _, _ = plan(t, p, b, t0.Add(30*time.Hour-time.Second))
	if len(b.cas) != 2 {
		t.Error("old CA dropped before it expired")
	}
	b, why, _ = plan(t, p, b, t0.Add(30*time.Hour))
	if len(b.cas) != 1 || serial(&b.cas[0]) == oldCA || why[0] != "a CA expired" {
		t.Errorf("at the old CA's expiry: cas %d why %q", len(b.cas), why)
	}
	verify(t, b, t0.Add(30*time.Hour))
}

func TestNamesChange(t *testing.T) {
	p := testPolicy()
	b, _, _ := plan(t, p, bundle{}, t0)
	p.names = parseSANs(ServiceDNSNames("other", "ns"))
	next, why, _ := plan(t, p, b, t0.Add(time.Minute))
	if len(why) != 1 || why[0] != "the serving certificate's names changed" || next.leaf.cert.DNSNames[0] != "other" {
		t.Errorf("why %q names %v", why, next.leaf.cert.DNSNames)
	}
}

func TestGarbageIsReplaced(t *testing.T) {
	p := testPolicy()
	good, _, _ := plan(t, p, bundle{}, t0)
	other, _, _ := plan(t, p, bundle{}, t0)
	for name, data := range map[string]map[string][]byte{
		"junk":                {CACertKey: []byte("junk"), CAKeyKey: []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), corev1.TLSCertKey: []byte("x")},
		"CA without its key":  {CACertKey: good.data()[CACertKey], CAKeyKey: other.data()[CAKeyKey]},
		"leaf of another key": {CACertKey: good.data()[CACertKey], CAKeyKey: good.data()[CAKeyKey], corev1.TLSCertKey: good.data()[corev1.TLSCertKey], corev1.TLSPrivateKeyKey: other.data()[corev1.TLSPrivateKeyKey]},
	} {
		next, why, _ := plan(t, p, parseBundle(data), t0)
		if next.leaf == nil || len(why) == 0 {
			t.Errorf("%s: nothing issued", name)
			continue
		}
		verify(t, next, t0)
	}
}

func TestUsable(t *testing.T) {
	b, _, _ := plan(t, testPolicy(), bundle{}, t0)
	if err := b.usable(t0.Add(9 * time.Hour)); err == nil {
		t.Error("an expired serving certificate is usable")
	}
	if err := (bundle{}).usable(t0); err == nil {
		t.Error("no serving certificate is usable")
	}
}

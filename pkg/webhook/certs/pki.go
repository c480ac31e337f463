package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// clockSkew backdates every certificate, so that a peer whose clock runs a
// little behind accepts it at once. Renewal times are measured from the
// moment of issue (NotBefore + clockSkew), not from NotBefore.
const clockSkew = time.Minute

// keyPair is a certificate with its key and their PEM encodings as stored.
type keyPair struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

// issuedAt is when c was issued.
func issuedAt(c *x509.Certificate) time.Time { return c.NotBefore.Add(clockSkew) }

// renewAt is two thirds into c's life.
func renewAt(c *x509.Certificate) time.Time {
	start := issuedAt(c)
	life := c.NotAfter.Sub(start)
	if life <= 0 {
		return start
	}
	return start.Add(life * 2 / 3)
}

// newCA issues a self-signed CA valid for validity from now.
func newCA(now time.Time, validity time.Duration) (keyPair, error) {
	return issue(&x509.Certificate{
		Subject:               pkix.Name{CommonName: fmt.Sprintf("fusebox-webhook-ca@%d", now.Unix())},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}, nil)
}

// newLeaf issues a serving certificate for names, signed by ca, valid for
// validity from now but never beyond ca.
func newLeaf(ca keyPair, names sans, now time.Time, validity time.Duration) (keyPair, error) {
	notAfter := now.Add(validity)
	if ca.cert.NotAfter.Before(notAfter) {
		notAfter = ca.cert.NotAfter
	}
	cn := "fusebox-webhook"
	if len(names.dns) > 0 {
		cn = names.dns[0]
	}
	return issue(&x509.Certificate{
		Subject:               pkix.Name{CommonName: cn},
		DNSNames:              names.dns,
		IPAddresses:           names.ips,
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              notAfter,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, &ca)
}

// issue gives tmpl a fresh key and a random serial number and signs it with
// parent's key, or with its own when parent is nil (a self-signed CA). Serials
// are random so that no two certificates of one CA share one (RFC 5280
// §4.1.2.2), whichever replica issued them.
func issue(tmpl *x509.Certificate, parent *keyPair) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return keyPair{}, err
	}
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128)); err != nil {
		return keyPair{}, err
	}
	issuer, signer := tmpl, crypto.Signer(key)
	if parent != nil {
		issuer, signer = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, &key.PublicKey, signer)
	if err != nil {
		return keyPair{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// sans are the subject alternative names of the serving certificate.
type sans struct {
	dns []string
	ips []net.IP
}

// parseSANs sorts names into DNS names and IP addresses: a client that dials
// an IP address checks the certificate's IP SANs only.
func parseSANs(names []string) sans {
	var s sans
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			s.ips = append(s.ips, ip)
		} else {
			s.dns = append(s.dns, n)
		}
	}
	return s
}

// matches says whether c names exactly s, in any order.
func (s sans) matches(c *x509.Certificate) bool {
	if !sameStrings(s.dns, c.DNSNames) {
		return false
	}
	var want, have []string
	for _, ip := range s.ips {
		want = append(want, ip.String())
	}
	for _, ip := range c.IPAddresses {
		have = append(have, ip.String())
	}
	return sameStrings(want, have)
}

func sameStrings(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

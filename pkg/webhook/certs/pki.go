package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Keys of the Secret besides tls.crt and tls.key.
const (
	CACertKey = "ca.crt"
	CAKeyKey  = "ca.key"
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

// bundle is what the Secret holds.
type bundle struct {
	cas  []keyPair // newest first; each with its key
	leaf *keyPair  // the serving certificate; nil if there is none usable
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

// parseBundle reads a Secret's data, dropping whatever does not parse: a CA
// certificate without its key, a serving certificate whose key does not match.
func parseBundle(data map[string][]byte) bundle {
	var b bundle
	keys := parseKeys(data[CAKeyKey])
	for _, block := range pemBlocks(data[CACertKey], "CERTIFICATE") {
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil || !cert.IsCA {
			continue
		}
		for _, k := range keys {
			if publicKeysEqual(cert.PublicKey, k.key.Public()) {
				b.cas = append(b.cas, keyPair{cert: cert, key: k.key, certPEM: pem.EncodeToMemory(block), keyPEM: k.pem})
				break
			}
		}
	}
	sort.SliceStable(b.cas, func(i, j int) bool { return b.cas[i].cert.NotBefore.After(b.cas[j].cert.NotBefore) })

	certPEM, keyPEM := data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey]
	if pair, err := tls.X509KeyPair(certPEM, keyPEM); err == nil {
		if cert, err := x509.ParseCertificate(pair.Certificate[0]); err == nil {
			if signer, ok := pair.PrivateKey.(crypto.Signer); ok {
				b.leaf = &keyPair{cert: cert, key: signer, certPEM: certPEM, keyPEM: keyPEM}
			}
		}
	}
	return b
}

type parsedKey struct {
	key crypto.Signer
	pem []byte
}

func parseKeys(data []byte) []parsedKey {
	var keys []parsedKey
	for _, block := range pemBlocks(data, "") {
		var (
			k   any
			err error
		)
		switch block.Type {
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		default:
			continue
		}
		if signer, ok := k.(crypto.Signer); err == nil && ok {
			keys = append(keys, parsedKey{key: signer, pem: pem.EncodeToMemory(block)})
		}
	}
	return keys
}

// pemBlocks returns data's PEM blocks of type typ ("" for any).
func pemBlocks(data []byte, typ string) []*pem.Block {
	var blocks []*pem.Block
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return blocks
		}
		if typ == "" || block.Type == typ {
			blocks = append(blocks, block)
		}
	}
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}

// data encodes b as the Secret's data.
func (b bundle) data() map[string][]byte {
	var caCerts, caKeys []byte
	for _, ca := range b.cas {
		caCerts = append(caCerts, ca.certPEM...)
		caKeys = append(caKeys, ca.keyPEM...)
	}
	d := map[string][]byte{CACertKey: caCerts, CAKeyKey: caKeys}
	if b.leaf != nil {
		d[corev1.TLSCertKey], d[corev1.TLSPrivateKeyKey] = b.leaf.certPEM, b.leaf.keyPEM
	}
	return d
}

// caBundle is what the API server should trust: every CA, newest first.
func (b bundle) caBundle() []byte { return b.data()[CACertKey] }

// sameData says whether have holds exactly want's keys' values.
func sameData(have, want map[string][]byte) bool {
	for k, v := range want {
		if !bytes.Equal(have[k], v) {
			return false
		}
	}
	return true
}

func newKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}

// newCA issues a self-signed CA valid for validity from now.
func newCA(now time.Time, validity time.Duration) (keyPair, error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return keyPair{}, err
	}
	serial, err := newSerial()
	if err != nil {
		return keyPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("fusebox-webhook-ca@%d", now.Unix())},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	return sign(tmpl, tmpl, &key.PublicKey, key, key, keyPEM)
}

// newLeaf issues a serving certificate for names, signed by ca, valid for
// validity from now but never beyond ca.
func newLeaf(ca keyPair, names sans, now time.Time, validity time.Duration) (keyPair, error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return keyPair{}, err
	}
	serial, err := newSerial()
	if err != nil {
		return keyPair{}, err
	}
	notAfter := now.Add(validity)
	if ca.cert.NotAfter.Before(notAfter) {
		notAfter = ca.cert.NotAfter
	}
	cn := "fusebox-webhook"
	if len(names.dns) > 0 {
		cn = names.dns[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		DNSNames:              names.dns,
		IPAddresses:           names.ips,
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              notAfter,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	return sign(tmpl, ca.cert, &key.PublicKey, ca.key, key, keyPEM)
}

func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer, key crypto.Signer, keyPEM []byte) (keyPair, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return keyPair{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM: keyPEM}, nil
}

// sans are the subject alternative names of the serving certificate.
type sans struct {
	dns []string
	ips []net.IP
}

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

// policy says how long certificates live and what the serving one names.
type policy struct {
	names            sans
	caValidity       time.Duration
	certValidity     time.Duration
	propagationDelay time.Duration
}

// plan returns the bundle the Secret should hold at now, why it differs from
// cur (empty if it does not), and when the bundle next needs a look.
func (p policy) plan(cur bundle, now time.Time) (next bundle, why []string, wake time.Time, err error) {
	for _, ca := range cur.cas {
		if now.Before(ca.cert.NotAfter) {
			next.cas = append(next.cas, ca)
		} else {
			why = append(why, "a CA expired")
		}
	}
	if len(next.cas) == 0 || !now.Before(renewAt(next.cas[0].cert)) {
		ca, err := newCA(now, p.caValidity)
		if err != nil {
			return bundle{}, nil, time.Time{}, fmt.Errorf("issue CA: %w", err)
		}
		if len(next.cas) == 0 {
			why = append(why, "no valid CA")
		} else {
			why = append(why, "the CA is due for renewal")
		}
		next.cas = append([]keyPair{ca}, next.cas...)
	}
	signer := p.signer(next.cas, now)
	next.leaf = cur.leaf
	if reason := p.leafProblem(cur.leaf, signer, now); reason != "" {
		leaf, err := newLeaf(signer, p.names, now, p.certValidity)
		if err != nil {
			return bundle{}, nil, time.Time{}, fmt.Errorf("issue serving certificate: %w", err)
		}
		next.leaf = &leaf
		why = append(why, reason)
	}

	wake = renewAt(next.cas[0].cert)
	earlier := func(t time.Time) {
		if t.Before(wake) {
			wake = t
		}
	}
	earlier(renewAt(next.leaf.cert))
	for _, ca := range next.cas {
		earlier(ca.cert.NotAfter)
	}
	if signer.cert != next.cas[0].cert {
		earlier(issuedAt(next.cas[0].cert).Add(p.propagationDelay))
	}
	return next, why, wake, nil
}

// signer is the CA that signs serving certificates: the newest that has been
// trusted for propagationDelay, or, if none has, the oldest (on first issue,
// the only one).
func (p policy) signer(cas []keyPair, now time.Time) keyPair {
	for _, ca := range cas {
		if !now.Before(issuedAt(ca.cert).Add(p.propagationDelay)) {
			return ca
		}
	}
	return cas[len(cas)-1]
}

// leafProblem says why leaf must be reissued, or "" if it need not.
func (p policy) leafProblem(leaf *keyPair, signer keyPair, now time.Time) string {
	switch {
	case leaf == nil:
		return "no usable serving certificate"
	case leaf.cert.CheckSignatureFrom(signer.cert) != nil:
		return "the serving certificate is not signed by the current CA"
	case !p.names.matches(leaf.cert):
		return "the serving certificate's names changed"
	case !now.Before(renewAt(leaf.cert)):
		return "the serving certificate is due for renewal"
	}
	return ""
}

// usable says whether b's serving certificate can be served at now.
func (b bundle) usable(now time.Time) error {
	if b.leaf == nil {
		return errors.New("no serving certificate whose key matches")
	}
	if !now.Before(b.leaf.cert.NotAfter) {
		return fmt.Errorf("the serving certificate expired at %s", b.leaf.cert.NotAfter.Format(time.RFC3339))
	}
	return nil
}

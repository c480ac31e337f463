package certs

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Keys of the Secret besides tls.crt and tls.key.
const (
	CACertKey = "ca.crt"
	CAKeyKey  = "ca.key"
)

// bundle is what the Secret holds: the CAs and the serving certificate, each
// with its key.
type bundle struct {
	cas  []keyPair // newest first; each with its key
	leaf *keyPair  // the serving certificate; nil if there is none usable
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

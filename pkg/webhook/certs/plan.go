package certs

import (
	"fmt"
	"time"
)

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

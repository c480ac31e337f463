package nodeagent

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The API server's OpenID discovery of its service-account issuer: the issuer's name and
// the public keys it signs tokens with. Every service account may read them (the
// system:service-account-issuer-discovery binding Kubernetes creates).
const (
	discoveryPath = "/.well-known/openid-configuration"
	jwksPath      = "/openid/v1/jwks"
)

const (
	// keysRefreshEvery bounds how often a token signed with a key the agent does not know
	// makes it fetch the keys again: the issuer's keys change when an administrator rotates
	// them, and a flood of made-up key IDs must not become a flood of reads.
	keysRefreshEvery = 30 * time.Second
	// notBeforeLeeway is how far ahead of the agent's clock a token's nbf may be: the
	// API server's and the node's clocks are not the same clock.
	notBeforeLeeway = time.Minute
)

// issuerKeys checks a pod's token itself, against the keys its issuer publishes, so that
// believing the pods of a starting node costs the API server nothing (a TokenReview costs
// it about 2.7 ms of CPU a token: docs/benchmarks.md, "Node agent"). It accepts a JWT
// signed by one of the issuer's keys, from that issuer, for the agent's audience, not
// expired, naming a service account and the pod and node it is bound to. What a signature
// cannot tell is whether those still exist: the pod the agent checks on every request in
// its pod cache anyway; a deleted service account's token it believes until the token
// expires, as it believed a kept review's answer (docs/design.md §9, "Identity"). Anything
// it cannot judge (no keys to be had, an issuer or algorithm it does not know, a key ID it
// has not seen) goes to a TokenReview as before; it never refuses a token on its own.
type issuerKeys struct {
	fetch func(ctx context.Context, path string) ([]byte, error)

	mu      sync.Mutex
	issuer  string
	keys    []publicKey // guarded by mu
	fetched time.Time   // when the last read began, whether or not it succeeded; zero before the first
	fetchMu sync.Mutex  // one fetch at a time

	fetches  atomic.Int64
	verified atomic.Int64
}

type publicKey struct {
	id  string // kid; "" matches any token's
	key crypto.PublicKey
}

func newIssuerKeys(fetch func(ctx context.Context, path string) ([]byte, error)) *issuerKeys {
	return &issuerKeys{fetch: fetch}
}

// verify returns the identity token names when it can tell the token is valid, and false
// when it cannot tell: the caller then asks the API server.
func (k *issuerKeys) verify(token string, now time.Time) (identity, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return identity{}, false
	}
	var header struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if !decodeSegment(parts[0], &header) {
		return identity{}, false
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return identity{}, false
	}
	issuer, keys := k.keysFor(header.Kid, now)
	if issuer == "" || !slices.ContainsFunc(keys, func(p publicKey) bool {
		return (p.id == "" || p.id == header.Kid) && verifySignature(header.Alg, p.key, parts[0]+"."+parts[1], sig)
	}) {
		return identity{}, false
	}
	var c tokenClaims
	if !decodeSegment(parts[1], &c) {
		return identity{}, false
	}
	id, ok := c.identity(issuer, now)
	if ok {
		k.verified.Add(1)
	}
	return id, ok
}

// keysFor returns the issuer and its keys, reading them first when the agent has none,
// or none with kid, and has not tried for keysRefreshEvery. A token that comes while
// they are being read waits for them.
func (k *issuerKeys) keysFor(kid string, now time.Time) (string, []publicKey) {
	k.mu.Lock()
	issuer, keys, fetched := k.issuer, k.keys, k.fetched
	k.mu.Unlock()
	known := slices.ContainsFunc(keys, func(p publicKey) bool { return p.id == "" || p.id == kid })
	if known || (!fetched.IsZero() && now.Sub(fetched) < keysRefreshEvery) {
		return issuer, keys
	}
	_ = k.refresh(fetched, now)
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.issuer, k.keys
}

// refresh reads the keys, unless someone has tried since seen (the last try the caller
// knew of). A failed read keeps the keys there were: it says nothing about them. The
// read is not a request's: one that gives up leaves it to finish for the next.
func (k *issuerKeys) refresh(seen, now time.Time) error {
	k.fetchMu.Lock()
	defer k.fetchMu.Unlock()
	k.mu.Lock()
	tried := !k.fetched.Equal(seen)
	k.mu.Unlock()
	if tried {
		return nil
	}
	issuer, keys, err := k.load()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fetched = now
	if err != nil {
		return err
	}
	k.issuer, k.keys = issuer, keys
	return nil
}

// load reads the issuer's discovery document and its key set.
func (k *issuerKeys) load() (string, []publicKey, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k.fetches.Add(1)
	raw, err := k.fetch(ctx, discoveryPath)
	if err != nil {
		return "", nil, err
	}
	var discovery struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.Unmarshal(raw, &discovery); err != nil || discovery.Issuer == "" {
		return "", nil, fmt.Errorf("%s names no issuer: %s", discoveryPath, raw)
	}
	if raw, err = k.fetch(ctx, jwksPath); err != nil {
		return "", nil, err
	}
	keys, err := parseJWKS(raw)
	if err != nil {
		return "", nil, err
	}
	return discovery.Issuer, keys, nil
}

// parseJWKS reads the signing keys of a JSON Web Key Set (RFC 7517): RSA keys and ECDSA
// keys on P-256, P-384 and P-521, the kinds the API server signs service-account tokens
// with. Keys of other kinds are left out.
func parseJWKS(raw []byte) ([]publicKey, error) {
	var set struct {
		Keys []struct {
			Kty, Use, Kid, Crv, N, E, X, Y string
		} `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("%s: %w", jwksPath, err)
	}
	var keys []publicKey
	for _, j := range set.Keys {
		if j.Use != "" && j.Use != "sig" {
			continue
		}
		switch j.Kty {
		case "RSA":
			n, errN := base64.RawURLEncoding.DecodeString(j.N)
			e, errE := base64.RawURLEncoding.DecodeString(j.E)
			if errN != nil || errE != nil || len(e) == 0 || len(e) > 4 {
				continue
			}
			exp := new(big.Int).SetBytes(e)
			keys = append(keys, publicKey{id: j.Kid, key: &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(exp.Int64())}})
		case "EC":
			var curve elliptic.Curve
			switch j.Crv {
			case "P-256":
				curve = elliptic.P256()
			case "P-384":
				curve = elliptic.P384()
			case "P-521":
				curve = elliptic.P521()
			default:
				continue
			}
			x, errX := base64.RawURLEncoding.DecodeString(j.X)
			y, errY := base64.RawURLEncoding.DecodeString(j.Y)
			size := (curve.Params().BitSize + 7) / 8
			if errX != nil || errY != nil || len(x) != size || len(y) != size {
				continue
			}
			key, err := ecdsa.ParseUncompressedPublicKey(curve, append(append([]byte{4}, x...), y...))
			if err != nil {
				continue
			}
			keys = append(keys, publicKey{id: j.Kid, key: key})
		}
	}
	if len(keys) == 0 {
		return nil, errors.New(jwksPath + " holds no RSA or ECDSA signing key")
	}
	return keys, nil
}

// verifySignature reports whether sig is alg's signature of signed by key. Only the
// algorithms the API server signs with count, each with the key kind it belongs to.
func verifySignature(alg string, key crypto.PublicKey, signed string, sig []byte) bool {
	switch key := key.(type) {
	case *rsa.PublicKey:
		if alg != "RS256" {
			return false
		}
		sum := sha256.Sum256([]byte(signed))
		return rsa.VerifyPKCS1v15(key, crypto.SHA256, sum[:], sig) == nil
	case *ecdsa.PublicKey:
		var sum []byte
		switch {
		case alg == "ES256" && key.Curve == elliptic.P256():
			s := sha256.Sum256([]byte(signed))
			sum = s[:]
		case alg == "ES384" && key.Curve == elliptic.P384():
			s := sha512.Sum384([]byte(signed))
			sum = s[:]
		case alg == "ES512" && key.Curve == elliptic.P521():
			s := sha512.Sum512([]byte(signed))
			sum = s[:]
		default:
			return false
		}
		size := (key.Curve.Params().BitSize + 7) / 8
		if len(sig) != 2*size {
			return false
		}
		r, s := new(big.Int).SetBytes(sig[:size]), new(big.Int).SetBytes(sig[size:])
		return ecdsa.Verify(key, sum, r, s)
	}
	return false
}

// tokenClaims is what a service-account token says, once its signature is checked.
type tokenClaims struct {
	Iss string          `json:"iss"`
	Sub string          `json:"sub"`
	Aud json.RawMessage `json:"aud"`
	Exp *int64          `json:"exp"`
	Nbf *int64          `json:"nbf"`
	K8s struct {
		Namespace      string   `json:"namespace"`
		ServiceAccount *boundTo `json:"serviceaccount"`
		Pod            *boundTo `json:"pod"`
		Node           *boundTo `json:"node"`
	} `json:"kubernetes.io"`
}

type boundTo struct {
	Name string    `json:"name"`
	UID  types.UID `json:"uid"`
}

// identity is who the claims name, if they are the issuer's for the agent's audience and
// valid at now.
func (c tokenClaims) identity(issuer string, now time.Time) (identity, bool) {
	aud, err := audiences(c.Aud)
	sa := c.K8s.ServiceAccount
	switch {
	case err != nil, c.Iss != issuer, !slices.Contains(aud, breakerconfig.NodeAgentAudience),
		c.Exp == nil || !now.Before(time.Unix(*c.Exp, 0)),
		c.Nbf != nil && now.Add(notBeforeLeeway).Before(time.Unix(*c.Nbf, 0)),
		c.K8s.Namespace == "", sa == nil || sa.Name == "",
		c.Sub != serviceAccountPrefix+c.K8s.Namespace+":"+sa.Name:
		return identity{}, false
	}
	id := identity{username: c.Sub, namespace: c.K8s.Namespace, serviceAccount: sa.Name}
	if p := c.K8s.Pod; p != nil {
		id.pod, id.podUID = p.Name, p.UID
	}
	if n := c.K8s.Node; n != nil {
		id.node = n.Name
	}
	return id, true
}

// decodeSegment decodes one base64url part of a JWT into v.
func decodeSegment(part string, v any) bool {
	raw, err := base64.RawURLEncoding.DecodeString(part)
	return err == nil && json.Unmarshal(raw, v) == nil
}

// Package certs is Fusebox's built-in certificate authority for its admission
// webhooks, for clusters without cert-manager: it issues the webhook server's
// serving certificate, keeps it fresh, and makes the API server trust it.
//
// Everything lives in one Secret (kubernetes.io/tls) in the operator's
// namespace: tls.crt and tls.key, the serving certificate and its key; ca.crt,
// the CA certificates the API server should trust (newest first); and ca.key,
// the CA keys, in the same order. Keys are ECDSA P-256.
//
// Three parts share that Secret, so that any number of replicas can serve:
//
//   - [Manager.Bootstrap], run by every replica before the webhook server
//     starts: reads the Secret, creates it if there is none (or repairs one that
//     holds no usable certificate), and writes the serving certificate into the
//     server's certificate directory. Creation and repair are optimistic
//     (create, or update at the read resourceVersion), so replicas racing to
//     bootstrap agree on one certificate.
//   - [Syncer], on every replica: watches the Secret and writes the serving
//     certificate into the directory whenever it changes, the way the kubelet
//     writes a Secret volume (a new hidden directory, then one atomic rename of
//     the ..data symlink), so controller-runtime's certwatcher never reads a
//     certificate with the other one's key. certwatcher reloads it.
//   - [Rotator], on the leader only: renews the serving certificate at two
//     thirds of its life and the CA at two thirds of its own, and sets the
//     caBundle of every webhook of Fusebox's webhook configurations to ca.crt,
//     again whenever someone resets it (a re-applied manifest, say).
//
// A new CA is trusted before it is used: the Rotator adds it to ca.crt and to
// the caBundles first, and signs serving certificates with it only once it has
// been trusted for PropagationDelay, so no replica ever serves a certificate
// the API server does not yet trust. The old CA stays trusted until it
// expires. The caBundle is always written before the Secret, for the same
// reason.
//
// One file per job: pki.go issues certificates; bundle.go is the Secret's
// data, parsed and encoded; plan.go decides what the Secret should hold at a
// given instant and when to look again; store.go reads, writes and watches the
// Secret; cabundle.go sets the caBundles, one path for both kinds of webhook
// configuration; watch.go watches one object by name, for both; files.go and
// syncer.go keep the certificate directory; rotator.go is the leader's loop;
// manager.go puts them together.
// docs/webhooks.md says why this is not github.com/open-policy-agent/cert-controller.
package certs

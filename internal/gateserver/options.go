package gateserver

import "flag"

// DefaultBindAddress is where the gate listens unless told otherwise: the port the
// fusebox-gate Service (config/default) targets.
const DefaultBindAddress = ":8444"

// Options configure the gate's server.
type Options struct {
	// BindAddress is the address the gate listens on; "0" disables it.
	BindAddress string
	// CertDir holds the serving certificate, tls.crt and tls.key, reloaded when they
	// change (cert-manager's Secret mounted there, say). Empty, or without both files:
	// a self-signed certificate made at start, as the metrics endpoint's.
	CertDir string
}

// DefaultOptions are the gate's defaults: on, self-signed.
func DefaultOptions() Options {
	return Options{BindAddress: DefaultBindAddress}
}

// BindFlags binds o's fields to flags of fs, with o's values as defaults.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.BindAddress, "gate-bind-address", o.BindAddress,
		`Address the rollout gate (HTTPS, docs/rollouts.md) binds to; "0" disables it.`)
	fs.StringVar(&o.CertDir, "gate-cert-dir", o.CertDir,
		"Directory of the gate's serving certificate (tls.crt, tls.key), reloaded when it changes; empty: a self-signed one made at start.")
}

// Enabled says whether the gate is to be served.
func (o Options) Enabled() bool { return o.BindAddress != "0" }

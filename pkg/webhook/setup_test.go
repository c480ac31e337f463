package webhook

import (
	"flag"
	"io"
	"testing"
	"time"
)

func TestBindFlags(t *testing.T) {
	o := DefaultOptions()
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.BindFlags(fs)
	if err := fs.Parse([]string{
		"--webhook-cert-mode=self-signed", "--webhook-port=10443", "--webhook-cert-dir=/certs",
		"--webhook-namespace=ops", "--webhook-extra-sans=127.0.0.1, localhost", "--webhook-cert-validity=24h",
		"--fuseboxd-image=registry.example.com/fuseboxd:v1",
	}); err != nil {
		t.Fatal(err)
	}
	if o.CertMode != CertModeSelfSigned || o.Port != 10443 || o.CertDir != "/certs" || o.Namespace != "ops" ||
		len(o.ExtraSANs) != 2 || o.ExtraSANs[1] != "localhost" || o.CertValidity != 24*time.Hour ||
		o.CAValidity != 365*24*time.Hour || o.SecretName != DefaultSecretName || o.SidecarImage != "registry.example.com/fuseboxd:v1" {
		t.Errorf("parsed %+v", o)
	}
	if err := fs.Parse([]string{"--webhook-cert-mode=on"}); err == nil {
		t.Error("unknown mode accepted")
	}
}

func TestDefaultsAreOff(t *testing.T) {
	if o := DefaultOptions(); o.CertMode != CertModeOff || o.Port != DefaultPort {
		t.Errorf("defaults %+v: webhooks must stay off until a deployment turns them on", o)
	}
}

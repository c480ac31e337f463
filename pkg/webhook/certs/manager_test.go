package certs

import (
	"testing"
	"time"
)

func TestNewValidatesOptions(t *testing.T) {
	ok := Options{Namespace: "ns", SecretName: "s", DNSNames: []string{"svc"}, CertDir: t.TempDir()}
	if _, err := New(nil, ok); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Options){
		"no namespace":         func(o *Options) { o.Namespace = "" },
		"no names":             func(o *Options) { o.DNSNames = nil },
		"no cert dir":          func(o *Options) { o.CertDir = "" },
		"propagation too long": func(o *Options) { o.CAValidity, o.PropagationDelay = 3*time.Hour, time.Hour },
		"negative":             func(o *Options) { o.CertValidity = -time.Second },
	} {
		o := ok
		mutate(&o)
		if _, err := New(nil, o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

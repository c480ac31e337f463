// Command helm generates the Helm chart in dist/chart from config/: it renders
// config/default twice with kustomize, as deployed (self-signed webhook
// certificates) and switched to cert-manager the way config/default's
// comments describe, and turns the two renders into one chart whose values
// choose between them. Whatever config/ deploys, the chart deploys: CRDs go
// to crds/, every other object to a template of its own.
//
// `make helm` runs it; CI runs it again and fails if dist/chart changed. It is
// a module of its own so the operator's module does not depend on Helm.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "helm:", err)
		os.Exit(1)
	}
}

func run() error {
	root := flag.String("root", "../..", "The repository root.")
	kustomize := flag.String("kustomize", "", "The kustomize binary (default: <root>/bin/kustomize).")
	out := flag.String("out", "", "The chart directory, replaced (default: <root>/dist/chart).")
	flag.Parse()
	if *kustomize == "" {
		*kustomize = filepath.Join(*root, "bin", "kustomize")
	}
	if *out == "" {
		*out = filepath.Join(*root, "dist", "chart")
	}
	chart, err := Generate(*root, *kustomize)
	if err != nil {
		return err
	}
	if err := chart.Write(*out); err != nil {
		return err
	}
	fmt.Printf("wrote %d files to %s\n", len(chart), *out)
	return nil
}

// Generate renders root's config/ and returns the chart.
func Generate(root, kustomize string) (Chart, error) {
	config := filepath.Join(root, "config")
	selfSignedObjs, err := render(kustomize, filepath.Join(config, "default"))
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "fusebox-helm-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	variant, err := certManagerVariant(config, tmp)
	if err != nil {
		return nil, err
	}
	certManagerObjs, err := render(kustomize, variant)
	if err != nil {
		return nil, fmt.Errorf("cert-manager variant of config/default: %w", err)
	}
	return generate(selfSignedObjs, certManagerObjs)
}

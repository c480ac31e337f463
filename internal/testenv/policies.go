package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// InstallPolicies applies the admission policies of config/policy (the API server's own
// checks, such as which BreakerReport a pod may write) to the control plane of cfg, as
// config/default installs them on a cluster. repoRoot is the path from the calling package
// to the repository root.
func InstallPolicies(cfg *rest.Config, repoRoot string) error {
	return applyDir(cfg, filepath.Join(repoRoot, "config", "policy"))
}

// InstallFlowControl applies the FlowSchemas and priority levels of config/flowcontrol
// (the operator's own priority level, a bounded one for pods' reports), server-side, as
// config/default installs them, but without the fusebox- prefix kustomize adds to names.
// Their subjects already name the operator's service account as deployed:
// fusebox-system/fusebox-controller-manager.
func InstallFlowControl(cfg *rest.Config, repoRoot string) error {
	return applyDir(cfg, filepath.Join(repoRoot, "config", "flowcontrol"))
}

func applyDir(cfg *rest.Config, dir string) error {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	objs, err := ReadManifests(dir)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("fusebox-testenv"), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

// ReadManifests reads every Kubernetes object of the YAML files in dir, leaving out
// kustomize's own files.
func ReadManifests(dir string) ([]*unstructured.Unstructured, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		switch filepath.Base(f) {
		case "kustomization.yaml", "kustomizeconfig.yaml":
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var o unstructured.Unstructured
			if err := dec.Decode(&o.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if len(o.Object) > 0 {
				objs = append(objs, &o)
			}
		}
	}
	return objs, nil
}

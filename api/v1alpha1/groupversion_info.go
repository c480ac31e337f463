// Package v1alpha1 contains the v1alpha1 API of the resilience.fusebox.dev group:
// the CircuitBreaker resource that declares a breaker for application pods.
//
// +kubebuilder:object:generate=true
// +groupName=resilience.fusebox.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: breakerconfig.Group, Version: breakerconfig.Version}

	// SchemeBuilder registers this package's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

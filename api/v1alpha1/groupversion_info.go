// Package v1alpha1 contains the v1alpha1 API of the resilience.fusebox.dev group:
// the CircuitBreaker resource that declares a breaker for application pods, the
// BreakerReport each pod writes about its breakers, and the NodeBreakerReport a node
// agent writes for the pods of its node.
//
// +kubebuilder:object:generate=true
// +groupName=resilience.fusebox.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: breakerconfig.Group, Version: breakerconfig.Version}

	// SchemeBuilder registers this package's types with a runtime.Scheme. It is
	// apimachinery's, as in Kubernetes' own API packages, so that importing the API
	// costs no controller-runtime.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds this package's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&CircuitBreaker{}, &CircuitBreakerList{},
		&BreakerReport{}, &BreakerReportList{},
		&NodeBreakerReport{}, &NodeBreakerReportList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// reportSink is where the reporter's report goes. The reporter decides what to send and
// when (the earned-first holds, the pacing of traffic); a sink only carries the whole
// report there.
type reportSink interface {
	// send delivers the whole report; nil means the receiver holds it.
	send(ctx context.Context, entries []breakerconfig.ReportEntry) error
	// refused reports whether err is the receiver refusing the report, which lasts
	// until somebody changes something, rather than being unreachable or busy.
	refused(err error) bool
	// receiver names who receives the report ("API server", "node agent"), and
	// describe the report there, for logs.
	receiver() string
	describe() string
}

var (
	_ reportSink = (*apiSink)(nil)
	_ reportSink = (*agentSink)(nil)
)

// breakerReports is the resource the API sink writes: one object per pod.
var breakerReports = schema.GroupVersionResource{
	Group: breakerconfig.Group, Version: breakerconfig.Version, Resource: breakerconfig.ReportResource,
}

// FieldManager is the server-side apply field manager of every pod's report. It owns
// every entry, so that an entry or field the pod stops setting is removed.
const FieldManager = "fusebox-pod"

// apiSink writes the pod's own BreakerReport by server-side apply (docs/design.md §7).
type apiSink struct {
	reports   dynamic.NamespaceableResourceInterface
	pods      kubernetes.Interface // reads the Pod's UID when podUID is not given
	namespace string
	pod       string

	mu     sync.Mutex
	podUID types.UID // guarded by mu; empty until known
}

func newAPISink(dc dynamic.Interface, cs kubernetes.Interface, namespace, pod string, podUID types.UID) *apiSink {
	return &apiSink{reports: dc.Resource(breakerReports), pods: cs, namespace: namespace, pod: pod, podUID: podUID}
}

func (s *apiSink) receiver() string { return "API server" }
func (s *apiSink) describe() string { return s.pod }

// refused reports whether err is the API server refusing the report itself (its schema,
// the admission policy, RBAC, no such resource), rather than being unreachable or busy.
func (s *apiSink) refused(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) ||
		apierrors.IsNotFound(err) || apierrors.IsUnauthorized(err)
}

// send applies the whole report, owned by this pod's Pod. One field manager owns every
// entry, so server-side apply removes the entries and fields the pod no longer sets (a
// breaker no longer published, a cleared configError).
func (s *apiSink) send(ctx context.Context, entries []breakerconfig.ReportEntry) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	uid, err := s.ownerUID(ctx)
	if err != nil {
		return err
	}
	body, err := json.Marshal(s.object(uid, entries))
	if err != nil {
		return err
	}
	force := true
	_, err = s.reports.Namespace(s.namespace).Patch(ctx, s.pod, types.ApplyPatchType, body, metav1.PatchOptions{
		FieldManager: FieldManager,
		Force:        &force,
	})
	return err
}

// ownerUID returns the UID of this pod's Pod: given in Options, or read once.
func (s *apiSink) ownerUID(ctx context.Context) (types.UID, error) {
	s.mu.Lock()
	uid := s.podUID
	s.mu.Unlock()
	if uid != "" {
		return uid, nil
	}
	pod, err := s.pods.CoreV1().Pods(s.namespace).Get(ctx, s.pod, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("read Pod %s/%s for the UID its report is owned by (set %s to skip this): %w", s.namespace, s.pod, EnvPodUID, err)
	}
	s.mu.Lock()
	s.podUID = pod.UID
	s.mu.Unlock()
	return pod.UID, nil
}

// report is the applied object: a BreakerReport as the pod writes it.
type report struct {
	APIVersion string                      `json:"apiVersion"`
	Kind       string                      `json:"kind"`
	Metadata   reportMeta                  `json:"metadata"`
	Breakers   []breakerconfig.ReportEntry `json:"breakers"`
}

type reportMeta struct {
	Name            string                  `json:"name"`
	Namespace       string                  `json:"namespace"`
	OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
}

func (s *apiSink) object(uid types.UID, entries []breakerconfig.ReportEntry) report {
	return report{
		APIVersion: breakerReports.GroupVersion().String(),
		Kind:       breakerconfig.ReportKind,
		Metadata: reportMeta{
			Name:      s.pod,
			Namespace: s.namespace,
			// The garbage collector deletes the report with its pod; the admission policy
			// checks that a pod names itself here.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: s.pod, UID: uid}},
		},
		Breakers: entries,
	}
}

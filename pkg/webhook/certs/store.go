package certs

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// fieldManager names Fusebox's certificate code in the managedFields of what
// it writes.
const fieldManager = "fusebox-webhook-certs"

// secretStore reads, writes and watches the one Secret that holds the
// certificates. Writes are optimistic: every replica may bootstrap, so the
// API server's resourceVersion check decides who wins a race.
type secretStore struct {
	client          kubernetes.Interface
	namespace, name string
}

func (s secretStore) String() string { return s.namespace + "/" + s.name }

// get returns the Secret, or nil if there is none.
func (s secretStore) get(ctx context.Context) (*corev1.Secret, error) {
	secret, err := s.client.CoreV1().Secrets(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("certs: read Secret %s: %w", s, err)
	}
	return secret, nil
}

// put creates the Secret with data (cur nil) or updates cur's keys to data's
// values at cur's resourceVersion, keeping any other keys it has. A lost race
// is a Conflict or AlreadyExists error.
func (s secretStore) put(ctx context.Context, cur *corev1.Secret, data map[string][]byte) error {
	secrets := s.client.CoreV1().Secrets(s.namespace)
	if cur == nil {
		_, err := secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:      s.name,
				Namespace: s.namespace,
				Labels: map[string]string{
					breakerconfig.ManagedByLabel:  breakerconfig.ManagedByValue,
					"app.kubernetes.io/component": "webhook",
				},
			},
			Type: corev1.SecretTypeTLS,
			Data: data,
		}, metav1.CreateOptions{FieldManager: fieldManager})
		return err
	}
	next := cur.DeepCopy()
	if next.Data == nil {
		next.Data = map[string][]byte{}
	}
	for k, v := range data {
		next.Data[k] = v
	}
	_, err := secrets.Update(ctx, next, metav1.UpdateOptions{FieldManager: fieldManager})
	return err
}

// watch sends handler the Secret's changes until ctx is done or stop is
// called.
func (s secretStore) watch(ctx context.Context, handler cache.ResourceEventHandler) (stop func(), err error) {
	return watchNamed(ctx, s.client, corev1.SchemeGroupVersion.WithResource("secrets"), s.namespace, s.name, handler)
}

// secretData is s's data, nil for no Secret.
func secretData(s *corev1.Secret) map[string][]byte {
	if s == nil {
		return nil
	}
	return s.Data
}

package certs

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Syncer is every replica's part of a Manager: it keeps CertDir in step with
// the Secret.
type Syncer struct{ m *Manager }

var (
	_ manager.Runnable               = (*Syncer)(nil)
	_ manager.LeaderElectionRunnable = (*Syncer)(nil)
)

// NeedLeaderElection implements manager.LeaderElectionRunnable: false.
func (*Syncer) NeedLeaderElection() bool { return false }

// Start writes the Secret's serving certificate into CertDir whenever it
// changes, until ctx is done. A Secret without a usable serving certificate
// (a half-written one, someone's mistake) leaves the files as they are.
func (s *Syncer) Start(ctx context.Context) error {
	m := s.m
	write := func(obj any) {
		secret, ok := obj.(*corev1.Secret)
		if !ok {
			return
		}
		b := parseBundle(secret.Data)
		if err := b.usable(m.opts.Now()); err != nil {
			m.log.Info("Secret holds no usable serving certificate; keeping the current one", "secret", m.secrets.String(), "reason", err.Error())
			return
		}
		if err := m.writeCertDir(b); err != nil {
			m.log.Error(err, "Cannot write the webhook serving certificate", "dir", m.opts.CertDir)
		}
	}
	stop, err := m.secrets.watch(ctx, cache.ResourceEventHandlerFuncs{
		AddFunc:    write,
		UpdateFunc: func(_, obj any) { write(obj) },
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	stop()
	return nil
}

// writeCertDir writes b's serving certificate into CertDir, both files at
// once (see writeFiles).
func (m *Manager) writeCertDir(b bundle) error {
	changed, err := writeFiles(m.opts.CertDir, map[string][]byte{
		m.opts.CertName: b.leaf.certPEM,
		m.opts.KeyName:  b.leaf.keyPEM,
	})
	if err != nil {
		return fmt.Errorf("certs: write the serving certificate into %s: %w", m.opts.CertDir, err)
	}
	if changed {
		m.log.Info("Wrote the webhook serving certificate", "dir", m.opts.CertDir,
			"serial", b.leaf.cert.SerialNumber.Text(16), "notAfter", b.leaf.cert.NotAfter)
	}
	return nil
}

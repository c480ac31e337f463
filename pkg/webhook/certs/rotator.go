package certs

import (
	"context"
	"time"

	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Rotator is the leader's part of a Manager: it renews the certificates and
// keeps the caBundles set.
type Rotator struct{ m *Manager }

var (
	_ manager.Runnable               = (*Rotator)(nil)
	_ manager.LeaderElectionRunnable = (*Rotator)(nil)
)

// NeedLeaderElection implements manager.LeaderElectionRunnable: true.
func (*Rotator) NeedLeaderElection() bool { return true }

// Start reconciles until ctx is done: at each renewal time, whenever the Secret
// or a webhook configuration changes, and at least every ResyncInterval.
// Errors are logged and retried with backoff; Start returns nil when ctx is
// done, and an error only if it cannot watch.
func (r *Rotator) Start(ctx context.Context) error {
	m := r.m
	poke := make(chan struct{}, 1)
	notify := func() {
		select {
		case poke <- struct{}{}:
		default:
		}
	}
	changed := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}
	stopSecret, err := m.secrets.watch(ctx, changed)
	if err != nil {
		return err
	}
	defer stopSecret()
	stopConfigs, err := m.caBundles.watch(ctx, changed)
	if err != nil {
		return err
	}
	defer stopConfigs()

	const minBackoff, maxBackoff = 500 * time.Millisecond, time.Minute
	backoff := minBackoff
	for {
		wake, err := m.Reconcile(ctx)
		wait := m.opts.ResyncInterval
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			m.log.Error(err, "Cannot rotate the webhook certificates; retrying", "in", backoff)
			wait, backoff = backoff, min(2*backoff, maxBackoff)
		} else {
			backoff = minBackoff
			wait = min(wait, max(0, wake.Sub(m.opts.Now())))
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		case <-poke:
			timer.Stop()
		}
	}
}

// Reconcile brings the Secret and the caBundles to what they should be now
// and returns when they next need a look. The caBundles are written before
// the Secret: trust before use.
func (m *Manager) Reconcile(ctx context.Context) (time.Time, error) {
	secret, err := m.secrets.get(ctx)
	if err != nil {
		return time.Time{}, err
	}
	next, why, wake, err := m.policy.plan(parseBundle(secretData(secret)), m.opts.Now())
	if err != nil {
		return time.Time{}, err
	}
	if err := m.caBundles.inject(ctx, next.caBundle()); err != nil {
		return time.Time{}, err
	}
	if secret != nil && sameData(secret.Data, next.data()) {
		return wake, nil
	}
	if err := m.secrets.put(ctx, secret, next.data()); err != nil {
		return time.Time{}, err
	}
	m.log.Info("Rotated the webhook certificates", "secret", m.secrets.String(), "why", why,
		"cas", len(next.cas), "certNotAfter", next.leaf.cert.NotAfter, "nextCheck", wake)
	return wake, nil
}

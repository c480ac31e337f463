package kube

import (
	"context"
	"errors"
	"time"
)

// FirstConfigWait is how long [FromEnvironment] waits for the first config before it
// returns a registry whose breakers run the default policy until the config arrives: long
// enough for a first read from a healthy API server or node agent on a busy node (a few
// hundred milliseconds), short enough that a pod whose cluster cannot answer still starts
// serving within a probe's patience.
const FirstConfigWait = 5 * time.Second

// firstConfigWait is FirstConfigWait; the package's tests shorten it.
var firstConfigWait = FirstConfigWait

// WaitLoaded blocks until the first config (or the knowledge that there is none) has been
// applied, and returns nil, or until ctx is done, and returns its error. See [Connection.Loaded].
func (c *Connection) WaitLoaded(ctx context.Context) error {
	select {
	case <-c.applier.loaded:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitFirstConfig waits up to wait for the first config, and says so in the connection's log
// when it gives up. It fails only when ctx itself ends.
func (c *Connection) waitFirstConfig(ctx context.Context, wait time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err := c.WaitLoaded(wctx)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		// The source's own lines say why (an unreachable API server, a refused token).
		c.applier.log.Warn("No breaker config yet; the breakers run the default policy until it arrives", "waited", wait)
		return nil
	}
	return err
}

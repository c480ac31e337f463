<?php

declare(strict_types=1);

namespace Fusebox;

/**
 * Leave to make one call, until its outcome is released. A permit not released within
 * its lease is dropped by the sidecar, as a call whose outcome never came.
 */
final class Permit
{
    public function __construct(
        public readonly string $breaker,
        /** The sidecar's id; null for a permit granted locally because it was unreachable. */
        public readonly ?string $id,
        /** The state it was granted in: half_open means this call is a probe. */
        public readonly State $state,
        public readonly int $leaseMs,
        /** When it was granted (hrtime, nanoseconds), to report the call's duration. */
        public readonly int $grantedAt,
    ) {
    }

    public function isProbe(): bool
    {
        return $this->state === State::HalfOpen;
    }
}

<?php

declare(strict_types=1);

namespace Fusebox;

/**
 * What a breaker does when the fuseboxd sidecar cannot be reached (not running yet, its
 * socket missing, too slow to answer).
 */
enum Unreachable
{
    /**
     * Run the call as if the circuit were closed (the default): losing the sidecar must
     * not take the application down with it, as losing the Go library's shared store does
     * not.
     */
    case FailOpen;
    /** Treat the circuit as open: the call is short-circuited to its fallback. */
    case FailClosed;
}

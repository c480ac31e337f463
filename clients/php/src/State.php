<?php

declare(strict_types=1);

namespace Fusebox;

/**
 * A breaker's state, spelled as the Go library and the fuseboxd API spell it.
 */
enum State: string
{
    case Closed = 'closed';
    case Open = 'open';
    case HalfOpen = 'half_open';
}

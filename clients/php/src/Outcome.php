<?php

declare(strict_types=1);

namespace Fusebox;

/**
 * How a call went, as its permit is released with it.
 */
enum Outcome: string
{
    /** The dependency answered (a 4xx it gave counts as an answer). */
    case Success = 'success';
    /** The dependency failed: the breaker counts it towards opening. */
    case Failure = 'failure';
    /** The call says nothing about the dependency (the caller gave up): neither. */
    case Ignored = 'ignored';
}

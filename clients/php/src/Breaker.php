<?php

declare(strict_types=1);

namespace Fusebox;

/**
 * One CircuitBreaker of the pod, decided by its fuseboxd sidecar and so shared by every
 * worker process of the pod: a failure one worker sees counts for all of them, and all of
 * them see the circuit open at once.
 *
 *     $payments = (new Fusebox\Client())->breaker('payments-api');
 *     $result = $payments->call(
 *         open: fn () => $cache->get('quote') ?? 'unavailable',
 *         close: fn () => $api->quote(),
 *         halfOpen: fn () => $api->quote(timeout: 1),
 *     );
 */
final class Breaker
{
    public function __construct(
        public readonly string $name,
        private readonly Client $client = new Client(),
        private readonly Unreachable $whenUnreachable = Unreachable::FailOpen,
    ) {
    }

    /**
     * Runs $close while the circuit is closed (or $halfOpen, when given, while it
     * probes), and $open instead when the call is short-circuited or when the callback
     * throws. $open receives the cause: a CircuitOpen, or what the callback threw.
     * A callback that returns counts as a success, one that throws as a failure.
     *
     * @template T
     * @param callable(\Throwable): T $open
     * @param callable(): T           $close
     * @param (callable(): T)|null    $halfOpen
     * @return T
     */
    public function call(callable $open, callable $close, ?callable $halfOpen = null): mixed
    {
        $permit = $this->acquire();
        if ($permit instanceof CircuitOpen) {
            return $open($permit);
        }
        $run = $permit->isProbe() && $halfOpen !== null ? $halfOpen : $close;
        try {
            $result = $run();
        } catch (\Throwable $e) {
            $this->release($permit, Outcome::Failure);
            return $open($e);
        }
        $this->release($permit, Outcome::Success);
        return $result;
    }

    /**
     * The first step of a call made in two: a Permit to make the call, or the
     * CircuitOpen that refuses it. Release the permit with the call's outcome.
     */
    public function acquire(?int $leaseMs = null): Permit|CircuitOpen
    {
        try {
            return $this->client->acquire($this->name, $leaseMs);
        } catch (SidecarError $e) {
            if (!$e->isUnavailable()) {
                throw $e;
            }
            return match ($this->whenUnreachable) {
                Unreachable::FailOpen => new Permit($this->name, null, State::Closed, 0, hrtime(true)),
                Unreachable::FailClosed => new CircuitOpen($this->name, State::Open, 'unreachable', 1000),
            };
        }
    }

    /**
     * The second step: reports how the call went. Returns false when the outcome counted
     * for nothing (the permit had been released already, or its lease had run out, or the
     * sidecar could not be reached).
     */
    public function release(Permit $permit, Outcome|bool $outcome): bool
    {
        if (is_bool($outcome)) {
            $outcome = $outcome ? Outcome::Success : Outcome::Failure;
        }
        try {
            return $this->client->release($permit, $outcome);
        } catch (SidecarError $e) {
            if (!$e->isUnavailable()) {
                throw $e;
            }
            return false;
        }
    }

    /** The state the sidecar holds now; with the sidecar unreachable, as the fallback says. */
    public function state(): State
    {
        try {
            return State::from((string) $this->client->describe($this->name)['state']);
        } catch (SidecarError $e) {
            if (!$e->isUnavailable()) {
                throw $e;
            }
            return $this->whenUnreachable === Unreachable::FailOpen ? State::Closed : State::Open;
        }
    }

    public function isOpen(): bool
    {
        return $this->state() === State::Open;
    }

    public function isClosed(): bool
    {
        return $this->state() === State::Closed;
    }

    public function isHalfOpen(): bool
    {
        return $this->state() === State::HalfOpen;
    }

    /** Opens the circuit now, for everyone (the seed's trip()). */
    public function trip(): void
    {
        $this->client->trip($this->name);
    }
}

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
 *         open: fn (\Throwable $cause) => $cache->get('quote') ?? 'unavailable',
 *         close: fn () => $api->quote(),
 *         halfOpen: fn () => $api->quote(timeout: 1),
 *     );
 */
final class Breaker
{
    /** @var \Closure(\Throwable): bool */
    private readonly \Closure $isFailure;

    /**
     * @param \Closure(\Throwable): bool|null $isFailure which throwables of a call count
     *        as failures (default: all); one it does not count is a success, and call()
     *        rethrows it without running open
     */
    public function __construct(
        public readonly string $name,
        private readonly Client $client = new Client(),
        private readonly Unreachable $whenUnreachable = Unreachable::FailOpen,
        ?\Closure $isFailure = null,
    ) {
        $this->isFailure = $isFailure ?? static fn (\Throwable $e): bool => true;
    }

    /**
     * call(open, close, halfOpen), as utopia-php/circuit-breaker has it: runs $close while the circuit is closed (or
     * $halfOpen, when given, while it probes), and $open instead when the call is
     * short-circuited or when the callback fails. $open receives the cause: a
     * CircuitOpen, or what the callback threw; without $open, that is thrown. A callback
     * that returns counts as a success. Nothing the sidecar answers makes call() throw
     * once the callback has run.
     *
     * @template T
     * @param (callable(\Throwable): T)|null $open
     * @param callable(): T                  $close
     * @param (callable(): T)|null           $halfOpen
     * @return T
     */
    public function call(?callable $open, callable $close, ?callable $halfOpen = null): mixed
    {
        $permit = $this->acquire();
        if ($permit instanceof CircuitOpen) {
            if ($open === null) {
                throw $permit;
            }
            return $open($permit);
        }
        $run = $permit->isProbe() && $halfOpen !== null ? $halfOpen : $close;
        try {
            $result = $run();
        } catch (\Throwable $e) {
            $failed = ($this->isFailure)($e);
            $this->release($permit, $failed ? Outcome::Failure : Outcome::Success);
            if ($failed && $open !== null) {
                return $open($e);
            }
            throw $e;
        }
        $this->release($permit, Outcome::Success);
        return $result;
    }

    /**
     * The first step of a call made in two: a Permit to make the call, or the
     * CircuitOpen that refuses it. Release the permit with the call's outcome.
     *
     * @throws SidecarError only when the sidecar judged the request wrong (a name that
     *                      cannot be a CircuitBreaker's): before any call ran
     */
    public function acquire(?int $leaseMs = null): Permit|CircuitOpen
    {
        if (!$this->client->backingOff()) {
            try {
                return $this->client->acquire($this->name, $leaseMs);
            } catch (SidecarError $e) {
                if (!$e->isUnavailable()) {
                    throw $e;
                }
            }
        }
        if ($this->whenUnreachable === Unreachable::FailClosed) {
            return new CircuitOpen($this->name, State::Open, 'unreachable', $this->client->backoffMs());
        }
        $this->client->failedOpen();
        return new Permit($this->name, null, State::Closed, 0, hrtime(true));
    }

    /**
     * The second step: reports how the call went. Returns false when the outcome counted
     * for nothing (the permit had been released already, or its lease had run out, or the
     * sidecar could not take it). It never throws.
     */
    public function release(Permit $permit, Outcome|bool $outcome): bool
    {
        if (is_bool($outcome)) {
            $outcome = $outcome ? Outcome::Success : Outcome::Failure;
        }
        return $this->client->release($permit, $outcome);
    }

    /**
     * The state the sidecar holds now; while it cannot decide, the state calls are
     * treated as (Closed when failing open): Client::unreachable() says which.
     */
    public function state(): State
    {
        if (!$this->client->backingOff()) {
            try {
                return State::from((string) $this->client->describe($this->name)['state']);
            } catch (SidecarError $e) {
                if (!$e->isUnavailable()) {
                    throw $e;
                }
            }
        }
        return $this->whenUnreachable === Unreachable::FailOpen ? State::Closed : State::Open;
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

    /** Opens the circuit now, for everyone (trip(), as utopia-php/circuit-breaker has it). @throws SidecarError */
    public function trip(): void
    {
        $this->client->trip($this->name);
    }
}

<?php

declare(strict_types=1);

namespace Fusebox;

/**
 * What a process knows of one sidecar, shared by every Client of the same socket (so by
 * every `new Breaker(...)` of a request): whether it is backing off after the sidecar
 * could not decide, the refusals still within their Retry-After, and the counters.
 *
 * The back-off is also left in a file of the temporary directory for the machine's other
 * PHP processes: a PHP-FPM worker keeps nothing between requests, and without it every
 * request's first call would wait for a hung sidecar's timeout again. A process adopts
 * it when it first uses the socket; where the directory is not writable, each process
 * (each request) backs off on its own.
 *
 * @internal
 */
final class Sidecar
{
    /** @var array<string, self> by socket, or base URL without one */
    private static array $known = [];

    /** hrtime(true) until which nothing asks the sidecar (CLOCK_MONOTONIC: the same in every process). */
    public int $downUntil = 0;
    /** Why it could not decide, until it answers again. */
    public ?SidecarError $unreachable = null;
    /** @var array<string, array{0: int, 1: CircuitOpen}> breaker => [when it came (hrtime), the refusal] */
    public array $refusals = [];
    public int $connects = 0;
    public int $requests = 0;
    public int $failedOpen = 0;
    public int $refusedLocally = 0;
    /** Whether this process logged the outage, and so logs its end. */
    private bool $told = false;
    private readonly string $marker;

    private function __construct(string $endpoint)
    {
        $this->marker = sys_get_temp_dir() . '/fusebox-' . substr(hash('sha256', $endpoint), 0, 16) . '.down';
        $left = @file_get_contents($this->marker);
        if ($left === false) {
            return;
        }
        [$until, $why] = explode("\n", $left, 2) + [1 => ''];
        if (ctype_digit($until) && (int) $until > hrtime(true)) {
            $this->downUntil = (int) $until;
            $this->unreachable = new SidecarError($why . ' (found by another process)');
        }
    }

    public static function of(string $endpoint): self
    {
        return self::$known[$endpoint] ??= new self($endpoint);
    }

    /** Where the back-off is left for the other processes. */
    public static function markerOf(string $endpoint): string
    {
        return self::of($endpoint)->marker;
    }

    public function backingOff(): bool
    {
        return $this->downUntil > 0 && hrtime(true) < $this->downUntil;
    }

    /**
     * The sidecar could not decide: nothing asks it for backoffMs. Returns whether the
     * outage is news to tell (the first failure since it last answered).
     */
    public function down(SidecarError $error, int $backoffMs): bool
    {
        $news = $this->unreachable === null;
        $this->unreachable = $error;
        $this->downUntil = hrtime(true) + $backoffMs * 1_000_000;
        $tmp = $this->marker . '.' . getmypid();
        if (@file_put_contents($tmp, $this->downUntil . "\n" . $error->getMessage()) !== false) {
            @rename($tmp, $this->marker);
        }
        $this->told = $this->told || $news;
        return $news;
    }

    /** The sidecar answered something it could mean. Returns whether to tell so. */
    public function up(): bool
    {
        if ($this->unreachable === null) {
            return false;
        }
        $this->unreachable = null;
        @unlink($this->marker);
        $told = $this->told;
        $this->told = false;
        return $told;
    }
}

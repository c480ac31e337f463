<?php

declare(strict_types=1);

namespace Fusebox;

use Psr\Log\LoggerInterface;

/**
 * Speaks the fuseboxd local API (docs/design.md §8) over its Unix socket, or over
 * loopback TCP when the sidecar also listens there. One curl handle is kept per Client,
 * so that a worker reuses one connection for all its calls.
 *
 * After a refused or timed-out connection, or an answer fuseboxd would never give, no
 * Client of the process touches that socket for $backoffMs: every breaker then fails open
 * (runs the call) or closed at once, as each was made. The logger (PSR-3; else PHP's
 * error_log) hears of it once when it begins and once when the sidecar answers again;
 * unreachable() says why while it lasts.
 */
final class Client
{
    public const DEFAULT_SOCKET = '/var/run/fusebox/fusebox.sock';

    /** When a refusal says nothing usable about when to ask again (fuseboxd's own default). */
    private const UNKNOWN_RETRY_AFTER_MS = 1000;

    /** @var \CurlHandle|null */
    private $curl = null;
    private readonly Sidecar $sidecar;

    /**
     * @param string|null $socket           the sidecar's Unix socket; null to use $baseUrl
     * @param string      $baseUrl          where the API is: ignored with a socket, except
     *                                      for the Host header
     * @param int         $timeoutMs        how long one request may take once connected
     * @param int         $connectTimeoutMs how long connecting may take
     * @param int         $backoffMs        how long breakers fail open (or closed) without
     *                                      asking, once the sidecar could not decide
     * @param int         $maxRetryAfterMs  how much of a refusal's Retry-After is honoured
     *                                      without asking again; 0 for none
     * @param LoggerInterface|null $logger  told when the sidecar stops and starts deciding;
     *                                      null for error_log()
     */
    public function __construct(
        private readonly ?string $socket = self::DEFAULT_SOCKET,
        private readonly string $baseUrl = 'http://fuseboxd',
        private readonly int $timeoutMs = 250,
        private readonly int $connectTimeoutMs = 100,
        private readonly int $backoffMs = 1000,
        private readonly int $maxRetryAfterMs = 1000,
        private readonly ?LoggerInterface $logger = null,
    ) {
        foreach (['timeoutMs' => $timeoutMs, 'connectTimeoutMs' => $connectTimeoutMs, 'backoffMs' => $backoffMs] as $name => $value) {
            if ($value <= 0) {
                throw new \InvalidArgumentException("fusebox: $name must be a positive number of milliseconds, not $value");
            }
        }
        if ($maxRetryAfterMs < 0) {
            throw new \InvalidArgumentException("fusebox: maxRetryAfterMs must be zero or more milliseconds, not $maxRetryAfterMs");
        }
        $this->sidecar = Sidecar::of($socket ?? $baseUrl);
    }

    /** A breaker of this pod, by its CircuitBreaker name. */
    public function breaker(string $name, Unreachable $whenUnreachable = Unreachable::FailOpen, ?\Closure $isFailure = null): Breaker
    {
        return new Breaker($name, $this, $whenUnreachable, $isFailure);
    }

    /**
     * Why the sidecar could not decide, from its first refused or timed-out connection (or
     * malformed answer) until it answers again; null while it answers.
     */
    public function unreachable(): ?SidecarError
    {
        return $this->sidecar->unreachable;
    }

    /** Whether calls skip the sidecar now, within the back-off. */
    public function backingOff(): bool
    {
        return $this->sidecar->backingOff();
    }

    /**
     * What the process's clients of this socket did: requests (curl transfers tried),
     * connects (connections opened), failedOpen (calls run without a permit because the
     * sidecar could not decide), refusedLocally (calls short-circuited within a refusal's
     * Retry-After, without asking).
     *
     * @return array{requests: int, connects: int, failedOpen: int, refusedLocally: int}
     */
    public function stats(): array
    {
        $s = $this->sidecar;
        return ['requests' => $s->requests, 'connects' => $s->connects, 'failedOpen' => $s->failedOpen, 'refusedLocally' => $s->refusedLocally];
    }

    /**
     * Asks for a permit.
     *
     * @return Permit|CircuitOpen a permit, or the refusal (every 429, whatever it says)
     * @throws SidecarError unavailable (isUnavailable()) when the sidecar cannot decide, and
     *                      so while backing off; else the sidecar judged the request wrong
     */
    public function acquire(string $breaker, ?int $leaseMs = null): Permit|CircuitOpen
    {
        $refusal = $this->sidecar->refusals[$breaker] ?? null;
        if ($refusal !== null) {
            [$at, $cause] = $refusal;
            $elapsedMs = intdiv(hrtime(true) - $at, 1_000_000);
            if ($elapsedMs < min($cause->retryAfterMs, $this->maxRetryAfterMs)) {
                $this->sidecar->refusedLocally++;
                return new CircuitOpen($breaker, $cause->state, $cause->reason, max(1, $cause->retryAfterMs - $elapsedMs));
            }
        }
        $body = $leaseMs === null ? '' : json_encode(['leaseMs' => $leaseMs], JSON_THROW_ON_ERROR);
        [$status, $data, $headers] = $this->request('acquire', 'POST', '/v1/breakers/' . rawurlencode($breaker) . '/permits', $body);
        if ($status === 201) {
            if ($data === null) {
                throw $this->down('acquire', 'a 201 whose body is not a JSON object');
            }
            $permit = $data['permit'] ?? null;
            if (!is_string($permit) || preg_match('/^[A-Za-z0-9_-]{1,128}$/', $permit) !== 1) {
                throw $this->down('acquire', 'a 201 without a permit');
            }
            $this->answered();
            $state = ($data['state'] ?? null) === State::HalfOpen->value ? State::HalfOpen : State::Closed;
            $lease = $data['leaseMs'] ?? 0;
            return new Permit($breaker, $permit, $state, is_int($lease) ? $lease : 0, hrtime(true));
        }
        if ($status === 429) {
            $this->answered();
            return $this->refusal($breaker, $data ?? [], $headers);
        }
        if ($status === 400 || $status === 413) {
            $this->answered();
            throw $this->refused('acquire', $status, $data);
        }
        throw $this->down('acquire', "a $status to an acquire: " . self::why($data));
    }

    /**
     * Reports a permit's outcome. Returns false when it counted for nothing: the sidecar no
     * longer knows the permit (already released, or its lease ran out), the permit was
     * never the sidecar's, or the sidecar could not take it. It never throws: the call
     * has run, and its result is the caller's.
     */
    public function release(Permit $permit, Outcome $outcome): bool
    {
        if ($permit->id === null || $this->sidecar->backingOff()) {
            return false;
        }
        $durationMs = intdiv(hrtime(true) - $permit->grantedAt, 1_000_000);
        $body = json_encode(['outcome' => $outcome->value, 'durationMs' => $durationMs], JSON_THROW_ON_ERROR);
        try {
            [$status, $data] = $this->request('release', 'POST', '/v1/permits/' . rawurlencode($permit->id), $body);
        } catch (SidecarError) {
            return false;
        }
        if ($status === 204 || $status === 410) {
            $this->answered();
            return $status === 204;
        }
        $this->down('release', "a $status to a release: " . self::why($data));
        return false;
    }

    /**
     * The breaker as the sidecar serves it (GET /v1/breakers/{name}; docs/fuseboxd.md): its
     * policy as the operator publishes it (docs/config-format.md), and what its candidate
     * policy did, when it has one.
     *
     * @return array{
     *     name: string,
     *     state: string,
     *     mode: string,
     *     counts: array{calls: int, failures: int, successes: int, slow: int},
     *     permits: array{held: int, lapsed: int, refusedAtCap: int},
     *     policy: array<string, mixed>,
     *     generation: int,
     *     candidate?: array<string, mixed>
     * }
     * @throws SidecarError
     */
    public function describe(string $breaker): array
    {
        [$status, $data] = $this->request('describe', 'GET', '/v1/breakers/' . rawurlencode($breaker), '');
        if ($status === 200 && is_string($data['state'] ?? null) && State::tryFrom($data['state']) !== null) {
            $this->answered();
            return $data;
        }
        if ($status >= 400 && $status < 500) {
            $this->answered();
            throw $this->refused('describe', $status, $data);
        }
        throw $this->down('describe', "a $status to a read: " . self::why($data));
    }

    /** Opens the breaker now, as the Go library's Trip does. @throws SidecarError */
    public function trip(string $breaker): void
    {
        [$status, $data] = $this->request('trip', 'POST', '/v1/breakers/' . rawurlencode($breaker) . '/trip', '');
        if ($status === 204) {
            $this->answered();
            return;
        }
        if ($status >= 400 && $status < 500) {
            $this->answered();
            throw $this->refused('trip', $status, $data);
        }
        throw $this->down('trip', "a $status to a trip: " . self::why($data));
    }

    /** @internal Counts a call run without a permit, for stats(). */
    public function failedOpen(): void
    {
        $this->sidecar->failedOpen++;
    }

    /** @internal How long breakers fail closed, to tell the callers when to ask again. */
    public function backoffMs(): int
    {
        return $this->backoffMs;
    }

    /**
     * Every 429 is a short-circuit, whatever its state and reason: a refusal the client
     * does not understand still says not to call.
     *
     * @param array<string, mixed>  $data
     * @param array<string, string> $headers
     */
    private function refusal(string $breaker, array $data, array $headers): CircuitOpen
    {
        $state = State::tryFrom(is_string($data['state'] ?? null) ? $data['state'] : '') ?? State::Open;
        $reason = is_string($data['reason'] ?? null) && $data['reason'] !== '' ? $data['reason'] : 'unknown';
        $retryAfterMs = $data['retryAfterMs'] ?? null;
        if (!is_int($retryAfterMs) || $retryAfterMs < 0) {
            $header = $headers['retry-after'] ?? '';
            $retryAfterMs = ctype_digit($header) && strlen($header) < 10 ? (int) $header * 1000 : self::UNKNOWN_RETRY_AFTER_MS;
        }
        $refusal = new CircuitOpen($breaker, $state, $reason, $retryAfterMs);
        // Kept for every client of the socket, each honouring as much as it is told to.
        // Only an open circuit's wait is a time: a half-open one's is a guess, and the
        // probe in flight may close the circuit any moment.
        if ($state === State::Open) {
            $this->sidecar->refusals[$breaker] = [hrtime(true), $refusal];
        } else {
            unset($this->sidecar->refusals[$breaker]);
        }
        return $refusal;
    }

    /**
     * One request, or an unavailable SidecarError thrown (and the back-off begun). A body
     * that is not a JSON object reads as null, which every caller then judges.
     *
     * @return array{0: int, 1: array<string, mixed>|null, 2: array<string, string>}
     */
    private function request(string $what, string $method, string $path, string $body): array
    {
        if ($this->sidecar->backingOff()) {
            throw $this->sidecar->unreachable ?? new SidecarError("fusebox: $what: the sidecar is backing off");
        }
        if ($this->curl === null) {
            $this->curl = curl_init();
        }
        $headers = [];
        $options = [
            CURLOPT_URL => rtrim($this->baseUrl, '/') . $path,
            CURLOPT_CUSTOMREQUEST => $method,
            CURLOPT_RETURNTRANSFER => true,
            CURLOPT_CONNECTTIMEOUT_MS => $this->connectTimeoutMs,
            CURLOPT_TIMEOUT_MS => $this->connectTimeoutMs + $this->timeoutMs,
            CURLOPT_NOSIGNAL => true,
            CURLOPT_HTTPHEADER => ['Content-Type: application/json', 'Expect:'],
            CURLOPT_POSTFIELDS => $body,
            CURLOPT_HEADERFUNCTION => static function ($ch, string $line) use (&$headers): int {
                $parts = explode(':', $line, 2);
                if (count($parts) === 2) {
                    $headers[strtolower(trim($parts[0]))] = trim($parts[1]);
                }
                return strlen($line);
            },
        ];
        if ($method === 'GET') {
            $options[CURLOPT_HTTPGET] = true;
            unset($options[CURLOPT_POSTFIELDS]);
        }
        if ($this->socket !== null) {
            $options[CURLOPT_UNIX_SOCKET_PATH] = $this->socket;
        }
        curl_reset($this->curl);
        curl_setopt_array($this->curl, $options);
        $this->sidecar->requests++;
        $raw = curl_exec($this->curl);
        $this->sidecar->connects += (int) curl_getinfo($this->curl, CURLINFO_NUM_CONNECTS);
        if ($raw === false) {
            throw $this->down($what, curl_error($this->curl));
        }
        $status = (int) curl_getinfo($this->curl, CURLINFO_RESPONSE_CODE);
        $data = [];
        if ($raw !== '') {
            try {
                $decoded = json_decode((string) $raw, true, 16, JSON_THROW_ON_ERROR);
            } catch (\JsonException $e) {
                $decoded = null;
            }
            $data = is_array($decoded) && !array_is_list($decoded) ? $decoded : null;
        }
        return [$status, $data, $headers];
    }

    /** The sidecar could not decide: nothing asks it again for backoffMs. */
    private function down(string $what, string $why): SidecarError
    {
        $where = $this->socket ?? $this->baseUrl;
        $error = new SidecarError("fusebox: $what: sidecar unreachable at $where: $why");
        if ($this->sidecar->down($error, $this->backoffMs)) {
            $this->log('warning', $error->getMessage() . "; breakers fail open (or closed, as each was made) without asking it, trying again every {$this->backoffMs} ms");
        }
        return $error;
    }

    /** The sidecar answered something it could mean. */
    private function answered(): void
    {
        if ($this->sidecar->up()) {
            $this->log('info', 'fusebox: the sidecar at ' . ($this->socket ?? $this->baseUrl) . ' answers again');
        }
    }

    private function log(string $level, string $message): void
    {
        if ($this->logger !== null) {
            $this->logger->log($level, $message, ['socket' => $this->socket ?? $this->baseUrl]);
        } else {
            error_log($message);
        }
    }

    /** @param array<string, mixed>|null $data */
    private function refused(string $what, int $status, ?array $data): SidecarError
    {
        return new SidecarError(sprintf('fusebox: %s: the sidecar refused the request (%d): %s', $what, $status, self::why($data)), $status);
    }

    /** @param array<string, mixed>|null $data */
    private static function why(?array $data): string
    {
        return isset($data['error']) && is_scalar($data['error']) ? (string) $data['error'] : 'no error given';
    }
}

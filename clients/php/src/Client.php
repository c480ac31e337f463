<?php

declare(strict_types=1);

namespace Fusebox;

/**
 * Speaks the fuseboxd local API (docs/design.md §8) over its Unix socket, or over
 * loopback TCP when the sidecar also listens there. One curl handle is kept per Client,
 * so that a worker reuses one connection for all its calls.
 */
final class Client
{
    public const DEFAULT_SOCKET = '/var/run/fusebox/fusebox.sock';

    /** @var \CurlHandle|null */
    private $curl = null;

    /**
     * @param string|null $socket  the sidecar's Unix socket; null to use $baseUrl
     * @param string      $baseUrl where the API is: ignored with a socket, except for
     *                             the Host header
     * @param int         $timeoutMs how long one request may take before the sidecar
     *                             counts as unreachable
     */
    public function __construct(
        private readonly ?string $socket = self::DEFAULT_SOCKET,
        private readonly string $baseUrl = 'http://fuseboxd',
        private readonly int $timeoutMs = 500,
    ) {
    }

    /** A breaker of this pod, by its CircuitBreaker name. */
    public function breaker(string $name, Unreachable $whenUnreachable = Unreachable::FailOpen): Breaker
    {
        return new Breaker($name, $this, $whenUnreachable);
    }

    /**
     * Asks for a permit.
     *
     * @return Permit|CircuitOpen a permit, or the refusal
     * @throws SidecarError when the sidecar cannot be reached or refuses the request
     */
    public function acquire(string $breaker, ?int $leaseMs = null): Permit|CircuitOpen
    {
        $body = $leaseMs === null ? '' : json_encode(['leaseMs' => $leaseMs], JSON_THROW_ON_ERROR);
        [$status, $data, $headers] = $this->request('POST', '/v1/breakers/' . rawurlencode($breaker) . '/permits', $body);
        if ($status === 201) {
            return new Permit($breaker, (string) $data['permit'], State::from((string) $data['state']), (int) $data['leaseMs'], hrtime(true));
        }
        if ($status === 429) {
            return new CircuitOpen($breaker, State::from((string) $data['state']), (string) $data['reason'], (int) $data['retryAfterMs']);
        }
        throw $this->unexpected('acquire', $status, $data);
    }

    /**
     * Reports a permit's outcome. Returns false when the sidecar no longer knows the
     * permit (already released, or its lease ran out): the outcome then counts for nothing.
     *
     * @throws SidecarError
     */
    public function release(Permit $permit, Outcome $outcome): bool
    {
        if ($permit->id === null) {
            return true;
        }
        $durationMs = intdiv(hrtime(true) - $permit->grantedAt, 1_000_000);
        $body = json_encode(['outcome' => $outcome->value, 'durationMs' => $durationMs], JSON_THROW_ON_ERROR);
        [$status, $data] = $this->request('POST', '/v1/permits/' . rawurlencode($permit->id), $body);
        return match ($status) {
            204 => true,
            410 => false,
            default => throw $this->unexpected('release', $status, $data),
        };
    }

    /**
     * The breaker as the sidecar serves it: name, state, mode, counts, policy, generation.
     *
     * @return array<string, mixed>
     * @throws SidecarError
     */
    public function describe(string $breaker): array
    {
        [$status, $data] = $this->request('GET', '/v1/breakers/' . rawurlencode($breaker), '');
        if ($status !== 200) {
            throw $this->unexpected('describe', $status, $data);
        }
        return $data;
    }

    /** Opens the breaker now, as the Go library's Trip does. @throws SidecarError */
    public function trip(string $breaker): void
    {
        [$status, $data] = $this->request('POST', '/v1/breakers/' . rawurlencode($breaker) . '/trip', '');
        if ($status !== 204) {
            throw $this->unexpected('trip', $status, $data);
        }
    }

    /**
     * @return array{0: int, 1: array<string, mixed>, 2: array<string, string>}
     */
    private function request(string $method, string $path, string $body): array
    {
        if ($this->curl === null) {
            $this->curl = curl_init();
        }
        $headers = [];
        $options = [
            CURLOPT_URL => rtrim($this->baseUrl, '/') . $path,
            CURLOPT_CUSTOMREQUEST => $method,
            CURLOPT_RETURNTRANSFER => true,
            CURLOPT_TIMEOUT_MS => $this->timeoutMs,
            CURLOPT_CONNECTTIMEOUT_MS => $this->timeoutMs,
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
        $raw = curl_exec($this->curl);
        if ($raw === false) {
            throw new SidecarError(sprintf('fusebox: sidecar unreachable (%s): %s', $this->socket ?? $this->baseUrl, curl_error($this->curl)));
        }
        $status = (int) curl_getinfo($this->curl, CURLINFO_RESPONSE_CODE);
        $data = [];
        if ($raw !== '') {
            try {
                $data = json_decode((string) $raw, true, 16, JSON_THROW_ON_ERROR);
            } catch (\JsonException $e) {
                throw new SidecarError('fusebox: the sidecar answered something other than JSON: ' . $e->getMessage(), 0, $e);
            }
            if (!is_array($data)) {
                throw new SidecarError('fusebox: the sidecar answered JSON that is not an object');
            }
        }
        return [$status, $data, $headers];
    }

    /** @param array<string, mixed> $data */
    private function unexpected(string $what, int $status, array $data): SidecarError
    {
        $why = isset($data['error']) ? (string) $data['error'] : 'no error given';
        return new SidecarError(sprintf('fusebox: %s: the sidecar answered %d: %s', $what, $status, $why), $status);
    }
}

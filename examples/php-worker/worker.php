<?php

// One PHP worker calling an upstream through the pod's breaker, as each of a pool of
// php-cli (or PHP-FPM) workers would. Every worker asks the same fuseboxd, so the circuit
// one worker's failures open is open for all of them at once.
//
//   php worker.php --breaker payments-api --upstream http://127.0.0.1:8080/ \
//       [--socket /var/run/fusebox/fusebox.sock] [--timeout-ms 250] [--interval-ms 20] [--stop-file FILE]
//
// Prints one line per call: the worker, the call, the state the answer came from, and
// what the caller got.

declare(strict_types=1);

use Fusebox\CircuitOpen;
use Fusebox\Client;

// Composer's autoloader when installed; else the client from this repository.
$vendor = __DIR__ . '/vendor/autoload.php';
require is_file($vendor) ? $vendor : __DIR__ . '/../../clients/php/autoload.php';

$opts = getopt('', ['breaker:', 'upstream:', 'socket:', 'timeout-ms:', 'interval-ms:', 'stop-file:', 'max-calls:']);
$name = $opts['breaker'] ?? 'payments-api';
$upstream = $opts['upstream'] ?? 'http://127.0.0.1:8080/';
$intervalUs = (int) ($opts['interval-ms'] ?? 20) * 1000;
$stopFile = $opts['stop-file'] ?? null;
$maxCalls = (int) ($opts['max-calls'] ?? 1000);
$worker = getmypid();

$client = new Client($opts['socket'] ?? Client::DEFAULT_SOCKET, timeoutMs: (int) ($opts['timeout-ms'] ?? 250));
$breaker = $client->breaker($name);
$http = curl_init();

for ($i = 1; $i <= $maxCalls; $i++) {
    if ($stopFile !== null && is_file($stopFile)) {
        break;
    }
    $answer = $breaker->call(
        open: fn (\Throwable $cause) => $cause instanceof CircuitOpen
            ? "fallback reason={$cause->reason}"
            : 'fallback reason=failed',
        close: function () use ($http, $upstream) {
            curl_setopt_array($http, [CURLOPT_URL => $upstream, CURLOPT_RETURNTRANSFER => true, CURLOPT_TIMEOUT_MS => 2000]);
            $body = curl_exec($http);
            $status = (int) curl_getinfo($http, CURLINFO_RESPONSE_CODE);
            if ($body === false || $status >= 500) {
                throw new \RuntimeException("upstream answered $status");
            }
            return 'ok';
        },
    );
    printf("worker=%d call=%d answer=%s\n", $worker, $i, $answer);
    usleep($intervalUs);
}

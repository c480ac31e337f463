<?php

// One PHP worker whose Guzzle client sends every request through the pod's breaker
// (Fusebox\Guzzle\BreakerMiddleware), as each of a pool of PHP-FPM or php-cli workers
// would. Every worker asks the same fuseboxd, so the circuit one worker's failures open
// is open for all of them at once: their requests are then never sent.
//
//   php worker.php --breaker payments-api --upstream http://127.0.0.1:8080/ \
//       [--socket /var/run/fusebox/fusebox.sock] [--timeout-ms 250] [--interval-ms 20] [--stop-file FILE]
//
// Prints one line per request: the worker, the request, and what the caller got.

declare(strict_types=1);

use Fusebox\Client;
use Fusebox\Guzzle\BreakerMiddleware;
use Fusebox\Guzzle\ShortCircuited;
use GuzzleHttp\Exception\TransferException;
use GuzzleHttp\HandlerStack;

// Composer's autoloader when installed; else the client from this repository and
// Debian's Guzzle (php-guzzlehttp-guzzle).
$vendor = __DIR__ . '/vendor/autoload.php';
if (is_file($vendor)) {
    require $vendor;
} else {
    require __DIR__ . '/../../clients/php/autoload.php';
    require 'GuzzleHttp/autoload.php';
}

$opts = getopt('', ['breaker:', 'upstream:', 'socket:', 'timeout-ms:', 'interval-ms:', 'stop-file:', 'max-calls:']);
$intervalUs = (int) ($opts['interval-ms'] ?? 20) * 1000;
$stopFile = $opts['stop-file'] ?? null;
$maxCalls = (int) ($opts['max-calls'] ?? 1000);
$worker = getmypid();

$fusebox = new Client($opts['socket'] ?? Client::DEFAULT_SOCKET, timeoutMs: (int) ($opts['timeout-ms'] ?? 250));
$stack = HandlerStack::create();
$stack->push(BreakerMiddleware::create($fusebox->breaker($opts['breaker'] ?? 'payments-api')), 'fusebox');
$http = new GuzzleHttp\Client(['handler' => $stack, 'timeout' => 2]);

for ($i = 1; $i <= $maxCalls; $i++) {
    if ($stopFile !== null && is_file($stopFile)) {
        break;
    }
    try {
        $http->get($opts['upstream'] ?? 'http://127.0.0.1:8080/');
        $answer = 'ok';
    } catch (ShortCircuited $e) {
        $answer = 'fallback reason=' . $e->circuitOpen()->reason;
    } catch (TransferException) {
        $answer = 'fallback reason=failed';
    }
    printf("worker=%d call=%d answer=%s\n", $worker, $i, $answer);
    usleep($intervalUs);
}

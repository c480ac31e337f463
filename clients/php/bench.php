<?php

// What a call through the client costs: one call() (an acquire and its release) against
// a live fuseboxd, and each call against a hung one and a missing socket (the back-off).
// Run by cmd/fuseboxd's BenchmarkClients, which starts the daemons (docs/benchmarks.md):
//
//   php bench.php --live SOCKET --hung SOCKET --missing PATH [--calls N]

declare(strict_types=1);

require __DIR__ . '/autoload.php';

use Fusebox\Breaker;
use Fusebox\Client;

$opts = getopt('', ['live:', 'hung:', 'missing:', 'calls:']);
$calls = (int) ($opts['calls'] ?? 20000);

/** @return list<int> nanoseconds per call */
function timed(Breaker $b, int $n): array
{
    $took = [];
    $noop = static fn () => null;
    for ($i = 0; $i < $n; $i++) {
        $start = hrtime(true);
        $b->call(null, $noop);
        $took[] = hrtime(true) - $start;
    }
    return $took;
}

function line(string $kind, array $took, string $extra = ''): void
{
    $s = $took;
    sort($s);
    $at = fn (float $q) => $s[min(count($s) - 1, (int) floor($q * count($s)))] / 1000;
    printf("%s calls=%d %sp50_us=%.1f p99_us=%.1f mean_us=%.1f\n", $kind, count($took), $extra, $at(0.5), $at(0.99), array_sum($took) / count($took) / 1000);
}

$live = (new Client($opts['live']))->breaker('bench');
timed($live, 1000);
line('live', timed($live, $calls));

// The defaults: the first call pays the timeout (or the refusal), the rest fall within
// the back-off. Its warning goes to a log nobody reads here.
ini_set('error_log', '/dev/null');
foreach (['hung' => $opts['hung'], 'missing' => $opts['missing']] as $kind => $socket) {
    $b = (new Client($socket))->breaker('bench');
    $first = timed($b, 1)[0];
    line($kind, timed($b, intdiv($calls, 2)), sprintf('first_us=%.1f ', $first / 1000));
}

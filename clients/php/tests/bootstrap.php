<?php

declare(strict_types=1);

// Without Composer's vendor/ (Debian's phpunit, no network): Fusebox\ from autoload.php,
// the tests' helpers here, and Guzzle and PSR-3 from Debian's packages
// (php-guzzlehttp-guzzle, php-psr-log) when they are installed.
require __DIR__ . '/../autoload.php';

spl_autoload_register(static function (string $class): void {
    if (str_starts_with($class, 'Fusebox\\Tests\\')) {
        $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, strlen('Fusebox\\Tests\\'))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});

foreach (['GuzzleHttp/autoload.php', 'Psr/Log/autoload.php'] as $lib) {
    if (stream_resolve_include_path($lib) !== false) {
        require_once $lib;
    }
}

// The back-off files (src/Sidecar.php) the suite's clients leave for other processes name
// the suite's own sockets, all under fbphp* and fblie* directories: removed at the end.
register_shutdown_function(static function (): void {
    foreach (glob(sys_get_temp_dir() . '/fusebox-*.down') ?: [] as $marker) {
        $text = (string) @file_get_contents($marker);
        if (str_contains($text, sys_get_temp_dir() . '/fbphp') || str_contains($text, sys_get_temp_dir() . '/fblie')) {
            @unlink($marker);
        }
    }
});

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

<?php

declare(strict_types=1);

// Without Composer's vendor/ (Debian's phpunit, no network), load Fusebox\ by PSR-4 here.
spl_autoload_register(static function (string $class): void {
    foreach (['Fusebox\\Tests\\' => __DIR__ . '/', 'Fusebox\\' => __DIR__ . '/../src/'] as $prefix => $dir) {
        if (str_starts_with($class, $prefix)) {
            $file = $dir . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
            if (is_file($file)) {
                require $file;
            }
            return;
        }
    }
});

<?php

declare(strict_types=1);

// Loads Fusebox\ without Composer: `require '/path/to/clients/php/autoload.php';`. With
// Composer, its autoloader does the same from composer.json.
spl_autoload_register(static function (string $class): void {
    if (str_starts_with($class, 'Fusebox\\')) {
        $file = __DIR__ . '/src/' . str_replace('\\', '/', substr($class, strlen('Fusebox\\'))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});

<?php

declare(strict_types=1);

// make typecheck-clients, for the PHP client. No static analyser of PHP (phpstan, Psalm,
// Phan) is packaged by Debian or published on npm, the registries CI installs from, so this
// checks the promise the signatures make with PHP itself: every file lints and declares
// strict_types; every public function, method and property of Fusebox\ declares its types
// (parameters, returns but a constructor's, properties); and a method that returns a bare
// `array` says what is in it with an `@return array{...}` or `array<...>` docblock. PHP
// then enforces those types on every call of the test suite (strict_types).

require __DIR__ . '/bootstrap.php'; // Fusebox\, and Guzzle and PSR-3 from Debian's packages

$problems = [];
$src = realpath(__DIR__ . '/../src');
$files = new RecursiveIteratorIterator(new RecursiveDirectoryIterator($src, FilesystemIterator::SKIP_DOTS));
foreach ($files as $file) {
    if ($file->getExtension() !== 'php') {
        continue;
    }
    $path = $file->getPathname();
    exec(escapeshellarg(PHP_BINARY) . ' -l ' . escapeshellarg($path) . ' 2>&1', $out, $code);
    if ($code !== 0) {
        $problems[] = "$path: " . implode(' ', $out);
    }
    if (!str_contains((string) file_get_contents($path), 'declare(strict_types=1);')) {
        $problems[] = "$path: no declare(strict_types=1)";
    }
    $class = 'Fusebox\\' . str_replace('/', '\\', substr($path, strlen($src) + 1, -4));
    if (!class_exists($class) && !interface_exists($class) && !enum_exists($class)) {
        $problems[] = "$path: declares no $class";
        continue;
    }
    $r = new ReflectionClass($class);
    foreach ($r->getProperties(ReflectionProperty::IS_PUBLIC) as $p) {
        if ($p->getDeclaringClass()->getName() === $class && !$p->hasType() && !$r->isEnum()) {
            $problems[] = "$class::\${$p->getName()}: no type";
        }
    }
    foreach ($r->getMethods(ReflectionMethod::IS_PUBLIC) as $m) {
        if ($m->getDeclaringClass()->getName() !== $class || $m->getFileName() !== $path) {
            continue;
        }
        $name = "$class::{$m->getName()}()";
        foreach ($m->getParameters() as $p) {
            if (!$p->hasType()) {
                $problems[] = "$name: parameter \${$p->getName()} has no type";
            }
        }
        if (!$m->isConstructor() && !$m->hasReturnType()) {
            $problems[] = "$name: no return type";
        }
        $returns = $m->getReturnType();
        if ($returns instanceof ReflectionNamedType && $returns->getName() === 'array'
            && !preg_match('/@return\s+(array\{|array<|list<)/', (string) $m->getDocComment())) {
            $problems[] = "$name: returns an array and its docblock does not say of what (@return array{...})";
        }
    }
}
foreach ($problems as $p) {
    fwrite(STDERR, "$p\n");
}
echo $problems === [] ? "typecheck: the PHP client's signatures are typed\n" : '';
exit($problems === [] ? 0 : 1);

<?php
// The PHP lock libraries of the client matrix (tests/clients/run.sh), as Debian installs them
// under /usr/share/php, bootstrapped without a framework:
//   Laravel's cache locks and Cache::add (php-illuminate-cache 8.83, php-illuminate-redis)
//   Symfony Lock's RedisStore (php-symfony-lock 5.4)
// each through phpredis (php-redis) and through predis (php-predis).
//
// Environment: RAFTLOCK_ADDRS=host:port,... (the first is the node the holder dials; the rival
// dials the second, if any; unset: nothing runs). RAFTLOCK_MATRIX: a file to which each scenario
// appends "library<TAB>scenario<TAB>pass|fail|skip<TAB>detail".
//
// Run: RAFTLOCK_ADDRS=127.0.0.1:6379 php tests/php/locks.php
// Exit status: 0 when every scenario passed, 1 otherwise.
//
// `php locks.php --hold LIB DRIVER HOST:PORT KEY` is the helper the wait scenarios start: it
// acquires KEY through LIB and DRIVER, prints "held", waits for a line "release MS" on its stdin,
// releases the lock MS milliseconds after that line, prints "released <unix time in ms>" and exits.
// The holder releases only when told, so a waiter that must time out cannot see a release however
// long a loaded machine stalls it.

declare(strict_types=1);

require_once 'Illuminate/Cache/autoload.php';
require_once 'Illuminate/Redis/autoload.php';
require_once 'Predis/autoload.php';
require_once 'Symfony/Component/Lock/autoload.php';

use Illuminate\Cache\RedisStore as LaravelStore;
use Illuminate\Cache\Repository;
use Illuminate\Contracts\Cache\LockTimeoutException;
use Illuminate\Redis\RedisManager;
use Symfony\Component\Lock\LockFactory;
use Symfony\Component\Lock\Store\RedisStore as SymfonyStore;

const DRIVERS = ['phpredis', 'predis'];
const SCENARIO_SECONDS = 20; // each scenario is interrupted after this long

final class Failed extends RuntimeException
{
}

function check(bool $ok, string $what): void
{
    if (!$ok) {
        throw new Failed($what);
    }
}

/** The cause first (the server's reply, usually), then the exceptions that wrapped it. */
function describe(Throwable $e): string
{
    $chain = [];
    for (; $e !== null; $e = $e->getPrevious()) {
        $short = substr(strrchr('\\' . get_class($e), '\\'), 1);
        array_unshift($chain, $e instanceof Failed ? $e->getMessage() : "$short: " . $e->getMessage());
    }
    return implode(' | wrapped in ', $chain);
}

function now_ms(): int
{
    return (int) floor(microtime(true) * 1000);
}

/** @return array{0: string, 1: int} */
function split_addr(string $addr): array
{
    $i = strrpos($addr, ':');
    return [substr($addr, 0, $i), (int) substr($addr, $i + 1)];
}

function unique_key(string ...$parts): string
{
    return 'cm:' . implode(':', $parts) . ':' . bin2hex(random_bytes(4));
}

// --- the libraries, as an application configures them --------------------------------------------

/** A Laravel cache repository on the redis store (config/cache.php's 'redis' store). */
function laravel_cache(string $driver, string $addr, int $database = 0): Repository
{
    [$host, $port] = split_addr($addr);
    $manager = new RedisManager(null, $driver, [
        'default' => ['host' => $host, 'port' => $port, 'database' => $database,
            'timeout' => 5.0, 'read_timeout' => 10.0, 'read_write_timeout' => 10.0],
    ]);
    return new Repository(new LaravelStore($manager, '', 'default'));
}

/** The client Symfony's RedisStore is given: \Redis for phpredis, Predis\Client for predis. */
function redis_client(string $driver, string $addr)
{
    [$host, $port] = split_addr($addr);
    if ($driver === 'phpredis') {
        $r = new \Redis();
        $r->connect($host, $port, 5.0, null, 0, 10.0);
        return $r;
    }
    return new \Predis\Client(['host' => $host, 'port' => $port, 'timeout' => 5.0,
        'read_write_timeout' => 10.0]);
}

function symfony_factory(string $driver, string $addr): LockFactory
{
    return new LockFactory(new SymfonyStore(redis_client($driver, $addr)));
}

/** Reads a key's state with plain commands, independently of the library under test. */
final class Inspector
{
    private \Redis $r;

    public function __construct(string $addr)
    {
        [$host, $port] = split_addr($addr);
        $this->r = new \Redis();
        $this->r->connect($host, $port, 5.0, null, 0, 10.0);
    }

    public function expectHeld(string $key, ?string $value, int $loMs, int $hiMs): void
    {
        $v = $this->r->get($key);
        check($v !== false, "GET $key: nil; want the lock held");
        if ($value !== null) {
            check($v === $value, "GET $key = " . var_export($v, true) . "; want the holder's value $value");
        }
        $d = $this->r->pttl($key);
        check($d > $loMs && $d <= $hiMs, "PTTL $key = $d; want in ($loMs, $hiMs]");
    }

    public function expectNoLease(string $key, string $value): void
    {
        $v = $this->r->get($key);
        check($v === $value, "GET $key = " . var_export($v, true) . "; want $value");
        $d = $this->r->pttl($key);
        check($d === -1, "PTTL $key = $d; want -1 (a lock without a lease)");
    }

    public function expectLease(string $key, int $loMs, int $hiMs): void
    {
        $d = $this->r->pttl($key);
        check($d > $loMs && $d <= $hiMs, "PTTL $key = $d; want in ($loMs, $hiMs]");
    }

    public function expectFree(string $key, string $why = 'want the lock free'): void
    {
        $n = $this->r->exists($key);
        check($n === 0, "EXISTS $key = $n; $why");
    }

    public function del(string $key): void
    {
        $this->r->del($key);
    }
}

// --- a holder in another process, for the wait scenarios -------------------------------------------

/** Starts `--hold`: returns once it holds the lock; releaseIn() lets it go. */
final class Holder
{
    /** @var resource */
    private $proc;
    /** @var resource */
    private $in;
    /** @var resource */
    private $out;

    public function __construct(string $lib, string $driver, string $addr, string $key)
    {
        $cmd = [PHP_BINARY, __FILE__, '--hold', $lib, $driver, $addr, $key];
        $this->proc = proc_open($cmd, [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['file', '/dev/null', 'a']], $pipes);
        check(is_resource($this->proc), 'could not start the holder process');
        $this->in = $pipes[0];
        $this->out = $pipes[1];
        $line = $this->line(5);
        check($line === 'held', 'the holder process: ' . ($line ?? 'no reply in 5 s') . '; want held');
    }

    /** Tells the holder to release the lock $ms milliseconds from now. */
    public function releaseIn(int $ms): void
    {
        check(fwrite($this->in, "release $ms\n") !== false, 'could not write to the holder process');
        fflush($this->in);
    }

    private function line(int $seconds): ?string
    {
        $r = [$this->out];
        $w = $e = null;
        if (stream_select($r, $w, $e, $seconds) !== 1) {
            return null;
        }
        $l = fgets($this->out);
        return $l === false ? null : trim($l);
    }

    /** The holder's release time (unix ms), waiting at most 10 s for it. */
    public function releasedAt(): int
    {
        $line = $this->line(10);
        check($line !== null && str_starts_with($line, 'released '),
            "the holder process: " . var_export($line, true) . "; want released <ms>");
        return (int) substr($line, 9);
    }

    public function stop(): void
    {
        if (!is_resource($this->proc)) {
            return;
        }
        $st = proc_get_status($this->proc);
        if ($st['running']) {
            posix_kill($st['pid'], SIGKILL);
        }
        fclose($this->in);
        fclose($this->out);
        proc_close($this->proc);
    }
}

function hold_main(array $args): int
{
    pcntl_alarm(SCENARIO_SECONDS);
    try {
        hold(...$args);
        return 0;
    } catch (Throwable $e) {
        echo 'error ' . preg_replace('/\s+/', ' ', describe($e)) . "\n";
        return 1;
    }
}

function hold(string $lib, string $driver, string $addr, string $key): void
{
    if ($lib === 'laravel') {
        $lock = laravel_cache($driver, $addr)->lock($key, 10);
        check($lock->get() === true, "holder: lock $key refused");
        $release = fn () => check($lock->release(), "holder: release of $key refused");
    } else {
        $lock = symfony_factory($driver, $addr)->createLock($key, 10.0, false);
        check($lock->acquire(), "holder: lock $key refused");
        $release = fn () => $lock->release();
    }
    echo "held\n";
    $line = fgets(STDIN);
    check($line !== false && preg_match('/^release (\d+)$/', trim($line), $m) === 1,
        'holder: ' . var_export($line, true) . ' on stdin; want release <ms>');
    usleep((int) $m[1] * 1000);
    $at = now_ms();
    $release();
    echo "released $at\n";
}

// --- scenarios ------------------------------------------------------------------------------------

$failures = 0;

function record(string $lib, string $scenario, string $result, string $detail = ''): void
{
    $path = getenv('RAFTLOCK_MATRIX');
    $detail = substr(trim(preg_replace('/\s+/', ' ', $detail)), 0, 300);
    printf("%-4s %s %s%s\n", $result, $lib, $scenario, $detail === '' ? '' : ": $detail");
    if ($path) {
        file_put_contents($path, "$lib\t$scenario\t$result\t$detail\n", FILE_APPEND | LOCK_EX);
    }
}

/** Runs fn as matrix scenario `name` of `lib`, interrupted after SCENARIO_SECONDS. */
function scenario(string $lib, string $name, callable $fn): void
{
    global $failures;
    pcntl_alarm(SCENARIO_SECONDS);
    try {
        $fn();
        pcntl_alarm(0);
        record($lib, $name, 'pass');
    } catch (Throwable $e) {
        pcntl_alarm(0);
        $failures++;
        record($lib, $name, 'fail', describe($e));
    }
}

function laravel_scenarios(string $driver, string $first, string $second): void
{
    $lib = "php/laravel-$driver";
    $a = laravel_cache($driver, $first);
    $b = laravel_cache($driver, $second);
    $inspect = new Inspector($first);
    $k = fn (string ...$p) => unique_key("laravel-$driver", ...$p);

    // Cache::lock($name, 10): SET name owner EX 10 NX; the rival on another node is refused.
    scenario($lib, 'acquire', function () use ($a, $b, $inspect, $k) {
        $key = $k('acquire');
        $lock = $a->lock($key, 10);
        check($lock->get() === true, 'get() on a free lock: false');
        $inspect->expectHeld($key, $lock->owner(), 5000, 10000);
        $lock->release();
    });
    scenario($lib, 'contend', function () use ($a, $b, $inspect, $k) {
        $key = $k('contend');
        $lock = $a->lock($key, 10);
        check($lock->get() === true, 'get() on a free lock: false');
        $rival = $b->lock($key, 10);
        check($rival->get() === false, "a rival's get() on a held lock: true");
        $inspect->expectHeld($key, $lock->owner(), 5000, 10000);
        $lock->release();
    });
    // Cache::lock($name) with its default 0 seconds: SETNX, a lock without a lease.
    scenario($lib, 'lock-0s', function () use ($a, $b, $inspect, $k) {
        $key = $k('zero');
        $lock = $a->lock($key);
        check($lock->get() === true, 'get() of a 0-second lock on a free key: false');
        $inspect->expectNoLease($key, $lock->owner());
        check($b->lock($key)->get() === false, "a rival's get() on a held 0-second lock: true");
        check($lock->release() === true, 'release of a 0-second lock: false');
        $inspect->expectFree($key);
    });
    // release() is a compare-and-delete script: another owner's release changes nothing.
    scenario($lib, 'release', function () use ($a, $b, $inspect, $k) {
        $key = $k('release');
        $lock = $a->lock($key, 10);
        check($lock->get() === true, 'get() on a free lock: false');
        check($b->lock($key, 10)->release() === false, "a rival's release: true");
        $inspect->expectHeld($key, $lock->owner(), 5000, 10000);
        check($lock->release() === true, "the owner's release: false");
        $inspect->expectFree($key);
        check($lock->release() === false, 'a second release: true');
        $next = $b->lock($key, 10);
        check($next->get() === true, 'a rival after the release: refused');
        $next->release();
    });
    // Cache::restoreLock($name, $owner): another process (here on another node) releases it.
    scenario($lib, 'restore', function () use ($a, $b, $inspect, $k) {
        $key = $k('restore');
        $lock = $a->lock($key, 10);
        check($lock->get() === true, 'get() on a free lock: false');
        check($b->restoreLock($key, 'not-' . $lock->owner())->release() === false,
            'release by a lock restored with a wrong owner: true');
        $restored = $b->restoreLock($key, $lock->owner());
        check($restored->owner() === $lock->owner(), 'restoreLock kept another owner');
        check($restored->release() === true, 'release by the restored lock: false');
        $inspect->expectFree($key);
    });
    // forceRelease(): DEL, whoever holds it.
    scenario($lib, 'force-release', function () use ($a, $b, $inspect, $k) {
        $key = $k('force');
        $lock = $a->lock($key, 10);
        check($lock->get() === true, 'get() on a free lock: false');
        $b->lock($key, 10)->forceRelease();
        $inspect->expectFree($key);
        $next = $b->lock($key, 10);
        check($next->get() === true, 'a rival after forceRelease: refused');
        $next->release();
    });
    // block($seconds): gives up with LockTimeoutException, or gets the lock once it is released.
    scenario($lib, 'block', function () use ($driver, $first, $b, $inspect, $k) {
        $key = $k('block');
        // Held until block(1) has given up: a stall in its retry loop cannot let it see the
        // release (a holder that let go after a fixed 1.3 s, then 2.5 s, was seen by block(1) on
        // redis-server on loaded CI machines).
        $holder = new Holder('laravel', $driver, $first, $key);
        try {
            $rival = $b->lock($key, 10)->betweenBlockedAttemptsSleepFor(50);
            $start = microtime(true);
            try {
                $rival->block(1);
                check(false, 'block(1) on a held lock returned');
            } catch (LockTimeoutException $e) {
                // Laravel counts whole seconds (time()): block(1) gives up at the next second.
                $took = microtime(true) - $start;
                check($took < 5, sprintf('block(1) gave up after %.2f s', $took));
            }
            $holder->releaseIn(300);
            check($rival->block(5) === true, 'block(5) did not get the released lock');
            $got = now_ms();
            $at = $holder->releasedAt();
            check($got >= $at, 'the waiter got the lock before the release');
            check($got - $at < 3000, sprintf('the waiter got the lock %d ms after the release', $got - $at));
            $inspect->expectHeld($key, $rival->owner(), 5000, 10000);
            $rival->release();
        } finally {
            $holder->stop();
        }
    });
    scenario($lib, 'expiry', function () use ($a, $b, $inspect, $k) {
        $key = $k('expiry');
        $start = microtime(true);
        $old = $a->lock($key, 1);
        check($old->get() === true, 'get() on a free lock: false');
        $next = $b->lock($key, 10);
        while (!$next->get()) {
            check(microtime(true) - $start < 6, 'the 1 s lease has not ended 6 s later');
            usleep(50000);
        }
        $took = microtime(true) - $start;
        check($took >= 1, sprintf('a rival got the lock %.3f s after a 1 s lease began: early', $took));
        check($old->release() === false, "the expired holder's release: true");
        $inspect->expectHeld($key, $next->owner(), 5000, 10000);
        $next->release();
    });
    // Cache::add: a script (EXISTS, then SETEX) that stores only when the key is absent.
    scenario($lib, 'add', function () use ($a, $b, $inspect, $k) {
        $key = $k('add');
        check($a->add($key, 'first', 10) === true, 'add on a free key: false');
        check($b->add($key, 'second', 10) === false, 'a second add: true');
        check($b->get($key) === 'first', 'get after two adds: ' . var_export($b->get($key), true));
        $inspect->expectLease($key, 5000, 10000);
        check($a->forget($key) === true, 'forget: false');
        check($b->add($key, 'third', 10) === true, 'add after forget: false');
        $b->forget($key);
    });
    // Laravel's default config/database.php puts the cache on database 1 (REDIS_CACHE_DB).
    // (phpredis's select() reports a refusal by returning false, which Laravel ignores: the check
    // that the key is not in database 0 tells whether database 1 was used.)
    scenario($lib, 'cache-db1', function () use ($driver, $first, $inspect, $k) {
        $c = laravel_cache($driver, $first, 1);
        $key = $k('db1');
        $lock = $c->lock($key, 10);
        check($lock->get() === true, 'get() on database 1: false');
        $inspect->expectFree($key, 'want it in database 1, not in database 0');
        check($lock->release() === true, 'release on database 1: false');
        check($c->add($key, 'v', 10) === true, 'add on database 1: false');
        $c->forget($key);
    });
}

function symfony_scenarios(string $driver, string $first, string $second): void
{
    $lib = "php/symfony-$driver";
    $a = symfony_factory($driver, $first);
    $b = symfony_factory($driver, $second);
    $inspect = new Inspector($first);
    $k = fn (string ...$p) => unique_key("symfony-$driver", ...$p);

    scenario($lib, 'acquire', function () use ($a, $inspect, $k) {
        $key = $k('acquire');
        $lock = $a->createLock($key, 10.0, false);
        check($lock->acquire() === true, 'acquire() on a free lock: false');
        check($lock->isAcquired(), 'isAcquired() after acquire: false');
        $inspect->expectLease($key, 5000, 10000);
        $lock->release();
        $inspect->expectFree($key);
    });
    scenario($lib, 'contend', function () use ($a, $b, $k) {
        $key = $k('contend');
        $lock = $a->createLock($key, 10.0, false);
        check($lock->acquire() === true, 'acquire() on a free lock: false');
        check($b->createLock($key, 10.0, false)->acquire() === false, "a rival's acquire(): true");
        check($lock->isAcquired(), 'isAcquired() after a refused rival: false');
        $lock->release();
    });
    scenario($lib, 'refresh', function () use ($a, $b, $inspect, $k) {
        $key = $k('refresh');
        $lock = $a->createLock($key, 10.0, false);
        check($lock->acquire() === true, 'acquire() on a free lock: false');
        $lock->refresh(30.0);
        $inspect->expectLease($key, 29000, 30000);
        check($lock->getRemainingLifetime() > 29, 'getRemainingLifetime after refresh(30): ' . $lock->getRemainingLifetime());
        $lock->release();
    });
    scenario($lib, 'release', function () use ($a, $b, $inspect, $k) {
        $key = $k('release');
        $lock = $a->createLock($key, 10.0, false);
        check($lock->acquire() === true, 'acquire() on a free lock: false');
        $lock->release();
        check(!$lock->isAcquired(), 'isAcquired() after release: true');
        $inspect->expectFree($key);
        $next = $b->createLock($key, 10.0, false);
        check($next->acquire() === true, 'a rival after the release: refused');
        $next->release();
    });
    scenario($lib, 'block', function () use ($driver, $first, $b, $k) {
        $key = $k('block');
        $holder = new Holder('symfony', $driver, $first, $key);
        try {
            $rival = $b->createLock($key, 10.0, false);
            $holder->releaseIn(300);
            check($rival->acquire(true) === true, 'acquire(true) did not get the released lock');
            $got = now_ms();
            $at = $holder->releasedAt();
            check($got >= $at, 'the waiter got the lock before the release');
            check($got - $at < 3000, sprintf('the waiter got the lock %d ms after the release', $got - $at));
            $rival->release();
        } finally {
            $holder->stop();
        }
    });
    // Read locks share; a write lock excludes them and is excluded by them.
    scenario($lib, 'shared', function () use ($a, $b, $k) {
        $key = $k('shared');
        $r1 = $a->createLock($key, 10.0, false);
        $r2 = $b->createLock($key, 10.0, false);
        $w = $b->createLock($key, 10.0, false);
        check($r1->acquireRead() === true, 'a first read lock: refused');
        check($r2->acquireRead() === true, 'a second read lock: refused');
        check($w->acquire() === false, 'a write lock while read locks are held: granted');
        $r1->release();
        check($w->acquire() === false, 'a write lock while a read lock is held: granted');
        $r2->release();
        check($w->acquire() === true, 'a write lock once the readers released: refused');
        check($r1->acquireRead() === false, 'a read lock while a write lock is held: granted');
        $w->release();
    });
}

// --- main -----------------------------------------------------------------------------------------

pcntl_async_signals(true);
pcntl_signal(SIGALRM, function () {
    throw new Failed('timed out after ' . SCENARIO_SECONDS . ' s');
});

if (($argv[1] ?? '') === '--hold') {
    exit(hold_main(array_slice($argv, 2)));
}

$addrs = array_values(array_filter(explode(',', (string) getenv('RAFTLOCK_ADDRS'))));
if (!$addrs) {
    fwrite(STDERR, "RAFTLOCK_ADDRS is not set: no server to test\n");
    exit(0);
}
$first = $addrs[0];
$second = $addrs[1] ?? $addrs[0];
foreach (DRIVERS as $driver) {
    laravel_scenarios($driver, $first, $second);
    symfony_scenarios($driver, $first, $second);
}
exit($failures ? 1 : 0);

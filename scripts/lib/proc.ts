import { readFileSync, readdirSync } from 'node:fs';

/** What the benchmarks read of a process they run, from Linux's /proc. */

/** utime + stime of a process (all its threads), in seconds. */
export function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** Peak resident set size (VmHWM), in MB. */
export function peakRssMb(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : 0;
}

export const percentile = (sorted: readonly number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;

/**
 * CPU seconds of each thread of a process so far, by thread id, with its nice value and its name (/proc's `comm`:
 * MainThread, WorkerThread, V8Worker, …; a thread exited since is gone).
 */
export function threadCpu(pid: number): Map<number, { seconds: number; nice: number; name: string }> {
  const threads = new Map<number, { seconds: number; nice: number; name: string }>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const fields = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      const name = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
      threads.set(Number(tid), { seconds: (Number(fields[11]) + Number(fields[12])) / 100, nice: Number(fields[16]), name });
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return threads;
}

/** The machine's CPU time so far, all CPUs together (/proc/stat): busy and idle (idle and iowait), in seconds. */
export function machineCpu(): { busy: number; idle: number } {
  // user nice system idle iowait irq softirq steal (guest time is already inside user and nice).
  const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1, 9).map(Number);
  const idle = (cpu[3] ?? 0) + (cpu[4] ?? 0);
  const total = cpu.reduce((a, b) => a + b, 0);
  return { busy: (total - idle) / 100, idle: idle / 100 };
}

/** The machine's context switches so far, all CPUs together (/proc/stat's ctxt). */
export function contextSwitches(): number {
  const line = readFileSync('/proc/stat', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('ctxt '));
  return Number(line?.split(/\s+/)[1] ?? 0);
}

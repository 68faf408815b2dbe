// Number formatting shared by the pages.

export function gib(bytes: number | null | undefined): string {
  if (bytes == null) return '–';
  return (bytes / 2 ** 30).toFixed(1) + ' GiB';
}

export function humanBytes(n: number | null | undefined): string {
  if (n == null) return '–';
  if (n >= 2 ** 30) return (n / 2 ** 30).toFixed(1) + ' GiB';
  if (n >= 2 ** 20) return (n / 2 ** 20).toFixed(1) + ' MiB';
  if (n >= 2 ** 10) return (n / 2 ** 10).toFixed(1) + ' KiB';
  return n + ' B';
}

export function pct(x: number | null | undefined): string {
  return x == null ? '–' : Math.round(x * 100) + ' %';
}

export function ms(us: number): string {
  const m = us / 1000;
  return m >= 100 ? m.toFixed(0) + ' ms' : m >= 1 ? m.toFixed(1) + ' ms' : m.toFixed(3) + ' ms';
}

export function num(x: number | null | undefined, digits = 1, unit = ''): string {
  return x == null ? '–' : x.toFixed(digits) + unit;
}

export function short(id: string): string {
  return id.slice(0, 8);
}

// counterValue formats a trace counter's value in its unit: bytes (and
// "bytes sent" and the like) as B/KiB/MiB/GiB, rates with theirs, a
// unitless count compactly.
export function counterValue(v: number, unit?: string): string {
  if (unit === 'bytes' || unit?.startsWith('bytes ')) return humanBytes(Math.round(v)) + unit.slice(5);
  const n = Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2);
  return unit ? `${n} ${unit}` : n;
}

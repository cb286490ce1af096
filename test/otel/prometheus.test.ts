import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { start } from '../../examples/otel-prometheus.js';
import { runExample } from '../helpers/run-example.js';

/** A port nothing listens on right now. */
function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once('error', fail);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => done(port));
    });
  });
}

/** The samples of a Prometheus text exposition: `name{labels}` → value (without the exporter's otel_scope_name label). */
function samples(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || line.trim() === '') continue;
    const at = line.lastIndexOf(' ');
    const name = line
      .slice(0, at)
      .replace(/,?otel_scope_name="valve"/, '')
      .replace('{,', '{');
    out.set(name, Number(line.slice(at + 1)));
  }
  return out;
}

describe('examples/otel-prometheus.ts', () => {
  it('serves the valve metrics of a valve and a group on /metrics (global meter provider, no meter given)', async () => {
    const port = await freePort();
    const { github, installations, stop } = await start(port);
    try {
      await Promise.all(Array.from({ length: 3 }, (_, i) => github.run(() => i)));
      await Promise.all(['42', '43', '42'].map((key) => installations.run(key, () => key)));
      await github.pause(60_000);
      const response = await fetch(`http://127.0.0.1:${port}/metrics`);
      expect(response.status).toBe(200);
      const text = await response.text();
      const s = samples(text);
      const github_ = 'valve_name="github"';
      const group = 'valve_name="github-installations"';
      expect(s.get(`valve_job_started_total{${github_}}`)).toBe(3);
      expect(s.get(`valve_job_started_total{${group}}`)).toBe(3);
      expect(s.get(`valve_job_wait_duration_count{${github_}}`)).toBe(3);
      expect(s.get(`valve_job_wait_duration_bucket{${github_},le="+Inf"}`)).toBe(3);
      expect(s.has(`valve_job_wait_duration_sum{${github_}}`)).toBe(true);
      expect(s.get(`valve_job_queued{${github_}}`)).toBe(0);
      expect(s.get(`valve_paused{${github_},valve_pause_source="manual"}`)).toBe(1);
      expect(s.get(`valve_pauses_total{${github_},valve_pause_source="manual"}`)).toBe(1);
      // One memory store for both, so at least one acquire per key, and the pause.
      expect(
        s.get('valve_store_operation_duration_count{valve_store_operation_name="acquire"}'),
      ).toBeGreaterThanOrEqual(3);
      expect(s.get('valve_store_operation_duration_count{valve_store_operation_name="pause"}')).toBe(1);
      expect(text).toMatch(/^# TYPE valve_job_wait_duration histogram$/m);
      expect(text).toMatch(/^# UNIT valve_job_wait_duration s$/m);
      expect(text).toMatch(/^# TYPE valve_job_started_total counter$/m);
      expect(text).toMatch(/^# TYPE valve_job_queued gauge$/m);
      // No id unless asked for: the group's keys are not labels.
      expect(text).not.toMatch(/valve_id=/);
    } finally {
      await stop();
    }
  });

  it('runs as a script: prints its own valve lines and exits by itself', async () => {
    const port = await freePort();
    const result = await runExample('examples/otel-prometheus.ts', { METRICS_PORT: String(port) });
    expect(result.signal, `killed: the process did not exit by itself\n${result.stderr}`).toBeNull();
    expect(result.code, result.stderr).toBe(0);
    const s = samples(result.stdout);
    expect(s.get('valve_job_started_total{valve_name="github"}')).toBe(6);
    expect(s.get('valve_job_started_total{valve_name="github-installations"}')).toBe(3);
    expect(s.get('valve_job_wait_duration_count{valve_name="github"}')).toBe(6);
    // 6 jobs at 5/s: the last waits one second (starts at 0, 0.2, …, 1.0 s), the sum is 3 s.
    expect(s.get('valve_job_wait_duration_sum{valve_name="github"}')).toBeGreaterThanOrEqual(2.9);
    expect(s.get('valve_paused{valve_name="github",valve_pause_source="manual"}')).toBe(1);
    expect(s.get('valve_store_operation_duration_count{valve_store_operation_name="pause"}')).toBe(1);
  }, 90_000);
});

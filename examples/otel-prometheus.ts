/**
 * valve's metrics on a Prometheus endpoint, as docs/metrics.md shows them. Run it with
 * `npx tsx examples/otel-prometheus.ts`: it serves http://localhost:9464/metrics, runs a few
 * jobs, pauses one valve, prints some valve lines of its own endpoint (without the exporter's
 * otel_scope_name label) and exits.
 */
// #region imports
import { metrics } from '@opentelemetry/api';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { createValve, createValveGroup, memoryStore } from '../src/index.js';
import { instrument, instrumentStore } from '../src/otel.js';
// #endregion imports

export async function start(port = 9464) {
  // #region provider
  // Once, at startup, before valves are instrumented: a meter provider that Prometheus scrapes.
  const exporter = new PrometheusExporter({ port }); // port 9464: http://localhost:9464/metrics
  const provider = new MeterProvider({ readers: [exporter] });
  metrics.setGlobalMeterProvider(provider);
  // #endregion provider
  await exporter.startServer();

  // #region valve
  // The store's calls are timed (and their failures counted) when it is wrapped.
  const store = instrumentStore(memoryStore()); // or instrumentStore(redisStore({ client }))

  const github = createValve({ id: 'github:app-42', rules: { limit: 5, interval: '1s' }, store });
  instrument(github, { attributes: { 'valve.name': 'github' } });
  // #endregion valve

  // #region group
  // A group reports every key into one series; includeId: true would add one per key.
  const installations = createValveGroup({ rules: { limit: 5000, interval: '1h' }, store });
  instrument(installations, { attributes: { 'valve.name': 'github-installations' } });
  // #endregion group

  return {
    github,
    installations,
    async stop() {
      await Promise.all([github.close(), installations.close()]);
      await provider.shutdown(); // stops the exporter's server too
      metrics.disable();
    },
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const port = Number(process.env.METRICS_PORT ?? 9464);
  const { github, installations, stop } = await start(port);
  await Promise.all([
    ...Array.from({ length: 6 }, (_, i) => github.run(() => i)),
    ...['42', '43', '42'].map((key) => installations.run(key, () => key)),
  ]);
  await github.pause('1m');
  const text = await (await fetch(`http://localhost:${port}/metrics`)).text();
  const shown =
    /^valve_(job_started_total|job_wait_duration_(count|sum)|job_queued|paused|store_operation_duration_count)[{ ]/;
  console.log(
    text
      .split('\n')
      .filter((line) => shown.test(line))
      .map((line) => line.replace(/,?otel_scope_name="valve"/, '').replace('{,', '{'))
      .join('\n'),
  );
  await stop();
}

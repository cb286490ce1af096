/**
 * A Store that wraps another and reports every grant with the store's own clock
 * reading. valve's bounds are stated on exactly that clock ("measured on the store's
 * clock at atomic admission"), so the demo's figures and SVG use these times rather
 * than times taken later inside the job.
 *
 * It is also a small example of the exported Store contract: any object with these
 * methods can be a valve's store.
 */
import type { AcquireRequest, AcquireResult, Store } from '../../src/index.js';

/** `onGrant(now, count)`: `count` jobs were admitted at store time `now` (epoch ms). */
export function recordingStore(inner: Store, onGrant: (now: number, count: number) => void): Store {
  const report = (result: AcquireResult): AcquireResult => {
    if (result.granted > 0) onGrant(result.now, result.granted);
    return result;
  };
  const store: Store = {
    acquire(request: AcquireRequest) {
      const result = inner.acquire(request);
      return result instanceof Promise ? result.then(report) : report(result);
    },
    pause: (id, ms) => inner.pause(id, ms),
    resume: (id) => inner.resume(id),
    renew: (id, tokens, ttl) => inner.renew(id, tokens, ttl),
    release: (id, tokens) => inner.release(id, tokens),
    get notifies() {
      return inner.notifies;
    },
  };
  if (inner.subscribe) {
    const subscribe = inner.subscribe.bind(inner);
    store.subscribe = (id, onWake) => subscribe(id, onWake);
  }
  return store;
}

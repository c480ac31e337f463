// The declarations used as an application uses them, for `tsc --noEmit` (make
// typecheck-clients): a call whose types the .d.ts gets wrong fails to compile. Nothing
// runs it.

import { Client, CircuitOpen, State, breaker, type Description } from '../index.js';

async function quote(): Promise<number> {
  const payments = breaker('payments-api');
  const price: number = await payments.call({
    open: (cause) => (cause instanceof CircuitOpen && cause.reason === 'unreachable' ? 0 : 1),
    close: async () => 42,
    halfOpen: () => 41,
  });
  const d: Description = await payments.describe();
  const open: boolean = d.state === State.OPEN;
  const held: number = d.permits.held + d.counts.failures + d.generation;
  const timeout: string = d.policy.openTimeout;
  const wouldRefuse: number | undefined = d.candidate?.wouldRefuse;
  const client = new Client({});
  client.on('unreachable', (e) => e.status);
  const permit = await client.breaker('inventory').acquire({ leaseMs: 500 });
  await client.breaker('inventory').release(permit, true);
  return price + (open ? 1 : 0) + held + timeout.length + (wouldRefuse ?? 0);
}

export { quote };

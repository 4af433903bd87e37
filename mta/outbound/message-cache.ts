import type { Deps } from '../../server/core/deps.js';
import type { Claimed } from '../delivery-queue.js';
import type { SigningKey } from '../dkim.js';
import type { Signer } from '../signer.js';

/** A message built and signed, and the email's `to` list it was built for. */
export interface BuiltMessage {
  message: Buffer;
  to: string[];
}

interface Entry {
  ready: Promise<BuiltMessage>;
  /** The held recipients of the email that share it. */
  users: number;
}

/** What building a message takes besides the store and the clock. */
export interface MessageCacheParts {
  signer: Pick<Signer, 'build'>;
  signingKey: (domainKeyId: string) => Promise<SigningKey & { id: string }>;
}

/**
 * The message of an email, built and signed (in the signer's thread) once for all its recipients while any of them is
 * held.
 */
export function createMessageCache(deps: Pick<Deps, 'clock'>, parts: MessageCacheParts) {
  const built = new Map<string, Entry>();

  function entryOf(job: Claimed): Entry {
    let entry = built.get(job.message.id);
    if (!entry) {
      // Everything, the reads too, inside the promise: a failure defers that recipient, it never stops the engine.
      const ready = Promise.resolve().then(async () => {
        const to = [...job.to];
        const message = await parts.signer.build(job.message, to, await parts.signingKey(job.message.domainKeyId), new Date(deps.clock.now()));
        return { message, to };
      });
      ready.catch(() => undefined);
      entry = { ready, users: 0 };
      built.set(job.message.id, entry);
    }
    return entry;
  }

  return {
    /** One more held recipient shares its email's message (whose build starts now, if it has not yet). */
    retain(job: Claimed): void {
      entryOf(job).users++;
    },
    /** A recipient of the email is finished: the message goes once none of its recipients is held. */
    release(messageId: string): void {
      const entry = built.get(messageId);
      if (entry && --entry.users === 0) built.delete(messageId);
    },
    /** The job's message, built and signed; a rejection (the build failed) is that recipient's to record. */
    messageOf(job: Claimed): Promise<BuiltMessage> {
      return entryOf(job).ready;
    },
  };
}

export type MessageCache = ReturnType<typeof createMessageCache>;

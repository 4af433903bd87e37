import { request } from 'node:http';

/**
 * Sends a request whose body arrives in two halves (chunked): `meanwhile` runs once the first half is in and the
 * server has had a moment with it (its guard has passed and it waits for the rest), then the rest is sent. For the
 * interleavings of something that changes while a body is arriving.
 */
export async function sendInHalves(
  base: string,
  request_: { method: string; path: string; headers: Record<string, string>; body: string },
  meanwhile: () => Promise<void> | void,
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; text: string }> {
  const url = new URL(`${base}${request_.path}`);
  const req = request({
    host: url.hostname,
    port: url.port,
    path: url.pathname,
    method: request_.method,
    headers: { ...request_.headers, 'transfer-encoding': 'chunked' },
  });
  const answer = new Promise<{ status: number; headers: Record<string, string | string[] | undefined>; text: string }>((resolve, reject) => {
    req.on('error', reject);
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
      res.on('error', reject);
    });
  });
  const half = Math.floor(request_.body.length / 2);
  await new Promise<void>((resolve, reject) => req.write(request_.body.slice(0, half), (err) => (err ? reject(err) : resolve())));
  await new Promise((r) => setTimeout(r, 100));
  await meanwhile();
  req.end(request_.body.slice(half));
  return answer;
}

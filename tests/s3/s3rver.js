// SPDX-License-Identifier: Apache-2.0
// Starts the S3 test server (tools/s3rver.sh start) on 127.0.0.1 and a free port, with one
// bucket, "cairn-test", and writes its endpoint to DIR/endpoint once it listens.
const fs = require('node:fs');
const path = require('node:path');
const S3rver = require('@20minutes/s3rver');
const dir = process.argv[2];
new S3rver({
  directory: path.join(dir, 'data'),
  address: '127.0.0.1',
  port: 0,
  silent: true,
  configureBuckets: [{ name: 'cairn-test', configs: [] }],
}).run().then(({ address, port }) => {
  fs.writeFileSync(path.join(dir, 'endpoint'), `http://${address}:${port}`);
});

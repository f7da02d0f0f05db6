#!/usr/bin/env node
// Baton client-matrix driver for kafkajs: produces the records that
// test/clients (kafkajs.go) asks for and prints one JSON line per record on
// stdout: {"seq":N,"key":K,"partition":P,"offset":O} on success,
// {"seq":N,"key":K,"error":E} on failure. Logs go to stderr.
//
// Usage: node produce.js '<json config>' where the config has client,
// bootstrap, topic, records, rate, idempotent, compression, headers,
// keyPrefix, for a paused run, pauseAt and resumeFile (records from pauseAt
// on wait until resumeFile exists) and, optionally, security (see
// securityConfig).
//
// kafkajs's send() answers one baseOffset per partition, not per record.
// Records go out in sequential send() calls (never two at once: the
// idempotent producer needs that, and it keeps the mapping simple); a
// wrapper around the default partitioner notes which partition each message
// object went to, and within one send() a partition's messages form one
// batch in the order given, so the k-th message of partition P in a send
// has offset baseOffset(P) + k.
'use strict'

const fs = require('fs')

let kafkajs
try {
  kafkajs = require('kafkajs')
} catch (e) {
  process.stderr.write(
    `produce.js: kafkajs is not installed (${e.message}); run npm ci in test/clients/kafkajs (test/clients/install.sh)\n`
  )
  process.exit(3)
}
const { Kafka, Partitioners, CompressionTypes, logLevel } = kafkajs

// At most this many records per send() when not paced.
const BATCH = 200

function fail(msg) {
  process.stderr.write(`produce.js: ${msg}\n`)
  process.exit(2)
}

if (process.argv.length !== 3) fail('usage: produce.js <json config>')
let cfg
try {
  cfg = JSON.parse(process.argv[2])
} catch (e) {
  fail(`bad config: ${e.message}`)
}

const codecs = { '': CompressionTypes.None, none: CompressionTypes.None, gzip: CompressionTypes.GZIP }
const compression = codecs[cfg.compression || '']
if (compression === undefined) fail(`compression ${cfg.compression} is not built into kafkajs`)

const key = seq => `${cfg.keyPrefix}-${seq}`
const value = seq => `value of ${cfg.keyPrefix}-${seq}`
const emit = obj => process.stdout.write(JSON.stringify(obj) + '\n')
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

// Every kafkajs log line goes to stderr: stdout carries acks only.
const logCreator = () => ({ namespace, label, log }) => {
  const { message, timestamp, logger, ...extra } = log
  process.stderr.write(`kafkajs ${label} [${namespace}] ${message} ${JSON.stringify(extra)}\n`)
}

// partitionOf remembers the partition the default partitioner chose for
// each message object (kafkajs passes the caller's objects through).
const partitionOf = new Map()
const createPartitioner = () => {
  const inner = Partitioners.DefaultPartitioner()
  return args => {
    const p = inner(args)
    partitionOf.set(args.message, p)
    return p
  }
}

// securityConfig is kafkajs's ssl and sasl for the config's security
// (absent: none): TLS with a CA and, for mTLS, a client certificate; SASL
// PLAIN, SCRAM or OAUTHBEARER, whose given token oauthBearerProvider hands
// out.
function securityConfig(sec) {
  if (!sec) return {}
  const out = {}
  if (sec.caFile) {
    out.ssl = { ca: [fs.readFileSync(sec.caFile, 'utf8')], rejectUnauthorized: true }
    if (sec.certFile) {
      out.ssl.cert = fs.readFileSync(sec.certFile, 'utf8')
      out.ssl.key = fs.readFileSync(sec.keyFile, 'utf8')
    }
  }
  switch (sec.mechanism || '') {
    case '':
      break
    case 'PLAIN':
    case 'SCRAM-SHA-256':
    case 'SCRAM-SHA-512':
      out.sasl = { mechanism: sec.mechanism.toLowerCase(), username: sec.user, password: sec.password }
      break
    case 'OAUTHBEARER':
      out.sasl = { mechanism: 'oauthbearer', oauthBearerProvider: async () => ({ value: sec.token }) }
      break
    default:
      fail(`SASL mechanism ${sec.mechanism} is not built into kafkajs`)
  }
  return out
}

const kafka = new Kafka({
  clientId: `baton-${cfg.client || 'kafkajs'}`,
  brokers: String(cfg.bootstrap).split(',').filter(Boolean),
  logLevel: logLevel.WARN,
  logCreator,
  ...securityConfig(cfg.security),
})
const producerConfig = { createPartitioner, idempotent: !!cfg.idempotent }
if (cfg.idempotent) producerConfig.maxInFlightRequests = 1
const producer = kafka.producer(producerConfig)

function message(seq) {
  const m = { key: key(seq), value: value(seq) }
  if (cfg.headers) m.headers = { 'baton-client': cfg.client || 'kafkajs', 'baton-seq': String(seq) }
  return m
}

async function sendBatch(first, end) {
  const messages = []
  for (let seq = first; seq < end; seq++) messages.push(message(seq))
  let res
  try {
    res = await producer.send({ topic: cfg.topic, messages, acks: -1, compression })
  } catch (e) {
    messages.forEach((m, i) => {
      partitionOf.delete(m)
      emit({ seq: first + i, key: m.key, error: `${e.name}: ${e.message}` })
    })
    return
  }
  const byPartition = new Map()
  for (const r of res) if (r.topicName === cfg.topic) byPartition.set(Number(r.partition), r)
  const index = new Map() // partition -> next index within its batch
  messages.forEach((m, i) => {
    const seq = first + i
    const p = partitionOf.get(m)
    const r = p === undefined ? undefined : byPartition.get(p)
    if (r === undefined) {
      emit({ seq, key: m.key, error: `kafkajs answered no result for the message's partition ${p}` })
      return
    }
    const k = index.get(p) || 0
    index.set(p, k + 1)
    if (r.errorCode !== 0) {
      emit({ seq, key: m.key, error: `partition ${p}: error code ${r.errorCode}` })
      return
    }
    const offset = BigInt(r.baseOffset) + BigInt(k)
    emit({ seq, key: m.key, partition: p, offset: Number(offset) })
  })
  messages.forEach(m => partitionOf.delete(m))
}

async function main() {
  const n = cfg.records
  const rate = cfg.rate || 0
  const pauseAt = cfg.pauseAt || 0
  await producer.connect()
  let start = process.hrtime.bigint()
  const elapsedMs = () => Number(process.hrtime.bigint() - start) / 1e6
  let next = 0
  while (next < n) {
    if (pauseAt > 0 && next === pauseAt) {
      while (!fs.existsSync(cfg.resumeFile)) await sleep(20)
      // Paced again from the resumption: record seq is due seq/rate after
      // a start moved forward by the pause.
      if (rate > 0) start = process.hrtime.bigint() - BigInt(Math.round((next * 1e9) / rate))
    }
    let due = n
    if (rate > 0) {
      // Records due by now: seq is due at seq/rate seconds.
      due = Math.min(n, Math.floor((elapsedMs() * rate) / 1000) + 1)
      if (due <= next) {
        await sleep(Math.max(1, (next * 1000) / rate - elapsedMs()))
        continue
      }
    }
    let end = Math.min(due, next + BATCH)
    if (pauseAt > next) end = Math.min(end, pauseAt)
    await sendBatch(next, end)
    next = end
  }
  await producer.disconnect()
}

main().catch(e => {
  process.stderr.write(`produce.js: ${e.stack || e}\n`)
  process.exitCode = 1
})

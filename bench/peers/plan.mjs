// The signal of every event of quiesce's `--scenario burst` (src/loadgen/plan.rs), so that a peer
// sends each entity the same upvotes, flags and reports as quiesce's load generator and the
// actions can be compared. The generator draws `rng.random_range(0..100)` per event from rand
// 0.9's StdRng seeded with `seed_from_u64(seed)` (default seed 1): 0..70 upvote, 70..95 flag,
// the rest report; event i goes to entity i % entities. StdRng is ChaCha12 (rand_chacha 0.9),
// reproduced here bit for bit.

const MASK64 = (1n << 64n) - 1n;

// rand_core's seed_from_u64: PCG32 output words fill the 32-byte seed.
function seedFromU64(state) {
  let s = BigInt(state) & MASK64;
  const words = new Uint32Array(8);
  for (let i = 0; i < 8; i++) {
    s = (s * 6364136223846793005n + 11634580027462260723n) & MASK64;
    const xorshifted = Number((((s >> 18n) ^ s) >> 27n) & 0xffffffffn);
    const rot = Number(s >> 59n);
    words[i] = ((xorshifted >>> rot) | (xorshifted << ((32 - rot) & 31))) >>> 0;
  }
  return words;
}

// ChaCha with 12 rounds, 64-bit block counter in words 12-13, stream 0; four blocks per refill
// (rand_chacha's buffer), read one u32 at a time.
class ChaCha12 {
  constructor(key) {
    this.key = key;
    this.counter = 0;
    this.buffer = new Uint32Array(64);
    this.index = 64;
  }

  refill() {
    const x = new Uint32Array(16);
    const input = new Uint32Array(16);
    for (let block = 0; block < 4; block++) {
      input.set([0x61707865, 0x3320646e, 0x79622d32, 0x6b206574]);
      input.set(this.key, 4);
      const position = this.counter + block;
      input[12] = position >>> 0;
      input[13] = Math.floor(position / 2 ** 32) >>> 0;
      input[14] = 0;
      input[15] = 0;
      x.set(input);
      for (let round = 0; round < 6; round++) {
        quarter(x, 0, 4, 8, 12);
        quarter(x, 1, 5, 9, 13);
        quarter(x, 2, 6, 10, 14);
        quarter(x, 3, 7, 11, 15);
        quarter(x, 0, 5, 10, 15);
        quarter(x, 1, 6, 11, 12);
        quarter(x, 2, 7, 8, 13);
        quarter(x, 3, 4, 9, 14);
      }
      for (let i = 0; i < 16; i++) this.buffer[block * 16 + i] = (x[i] + input[i]) >>> 0;
    }
    this.counter += 4;
    this.index = 0;
  }

  nextU32() {
    if (this.index >= 64) this.refill();
    return this.buffer[this.index++];
  }
}

function quarter(x, a, b, c, d) {
  x[a] = (x[a] + x[b]) >>> 0; x[d] = rotl(x[d] ^ x[a], 16);
  x[c] = (x[c] + x[d]) >>> 0; x[b] = rotl(x[b] ^ x[c], 12);
  x[a] = (x[a] + x[b]) >>> 0; x[d] = rotl(x[d] ^ x[a], 8);
  x[c] = (x[c] + x[d]) >>> 0; x[b] = rotl(x[b] ^ x[c], 7);
}

function rotl(v, n) {
  return ((v << n) | (v >>> (32 - n))) >>> 0;
}

// rand 0.9's UniformInt::sample_single_inclusive for a u32 range (without the `unbiased`
// feature, which quiesce does not enable): a widening multiply, and one more draw when the low
// half falls in the biased zone.
function below(rng, range) {
  const draw = BigInt(rng.nextU32()) * BigInt(range);
  let result = Number(draw >> 32n);
  const low = Number(draw & 0xffffffffn);
  if (low > 2 ** 32 - range) {
    const high = Number((BigInt(rng.nextU32()) * BigInt(range)) >> 32n);
    if (low + high > 0xffffffff) result += 1;
  }
  return result;
}

// The signals of events 0..events of the burst scenario, in order.
export function burstSignals(events, seed = 1) {
  const rng = new ChaCha12(seedFromU64(seed));
  const signals = new Array(events);
  for (let i = 0; i < events; i++) {
    const n = below(rng, 100);
    signals[i] = n < 70 ? 'upvote' : n < 95 ? 'flag' : 'report';
  }
  return signals;
}

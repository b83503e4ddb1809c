"""The `local` provider's image, speech and embedding models: in-process, deterministic, standard library
only (gateway.local_models says what they are for; docs/local-models.md how they answer).

- image: a real PNG (RGB, 8 bits) of the asked size, a gradient with stripes coloured by the prompt;
- speech: a real 16-bit mono WAV (or the same samples as raw PCM), one tone per character;
- embedding: signed feature hashing of words, word pairs and character trigrams, L2-normalised.

The heavy work runs through utils_app.event_loop, as the chat model's does.
"""
from __future__ import annotations

import array
import hashlib
import io
import math
import re
import struct
import sys
import wave
import zlib
from collections import Counter

from gateway.local_models import digest
from utils_app import event_loop

# A word (letters, digits, underscore) or one punctuation mark: the embeddings' words.
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


# ---------------------------------------------------------------- image

MAX_IMAGE_SIDE = 4096
# Rows are shaded in at most this many distinct bands; rows inside a band are identical,
# which keeps a 4096x4096 picture to a few hundred translated rows and compresses well.
_IMAGE_BANDS = 256


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _palette(seed_bytes: bytes, offset: int) -> tuple[int, int, int]:
    return seed_bytes[offset], seed_bytes[offset + 1], seed_bytes[offset + 2]


def render_png(width: int, height: int, prompt: str, seed: int = 0) -> bytes:
    """A real PNG (8-bit RGB, no interlace) of width x height, drawn from the prompt and seed.

    The picture is a horizontal blend between two colours with soft vertical stripes, darkened
    from top to bottom. Only one row is computed pixel by pixel; the other rows are that row
    passed through a per-band brightness table (bytes.translate runs in C), so even
    4096x4096 takes well under a second, most of it in zlib.
    """
    if not isinstance(width, int) or not isinstance(height, int):
        raise ValueError("width and height must be integers")
    if not (1 <= width <= MAX_IMAGE_SIDE and 1 <= height <= MAX_IMAGE_SIDE):
        raise ValueError(f"width and height must be between 1 and {MAX_IMAGE_SIDE}")
    return event_loop.run(_render_png, width * height // 64, width, height, prompt, seed)


def _render_png(width: int, height: int, prompt: str, seed: int) -> bytes:
    colours = digest("image", prompt, seed)
    left, right = _palette(colours, 0), _palette(colours, 3)
    stripes = 1 + colours[6] % 12  # number of stripes across the picture
    stripe_depth = 0.15 + (colours[7] / 255) * 0.35
    phase = colours[8] / 255 * 2 * math.pi

    row = bytearray(width * 3)
    span = max(width - 1, 1)
    for x in range(width):
        t = x / span
        light = 1.0 - stripe_depth * (0.5 + 0.5 * math.sin(phase + 2 * math.pi * stripes * t))
        for channel in range(3):
            value = (left[channel] * (1 - t) + right[channel] * t) * light
            row[x * 3 + channel] = int(value)
    base_row = bytes(row)

    compressor = zlib.compressobj(6)
    parts = []
    bands = min(height, _IMAGE_BANDS)
    for band in range(bands):
        first = band * height // bands
        last = (band + 1) * height // bands
        # Top rows keep full brightness; the bottom ones fall to 45 %.
        factor = 1.0 - 0.55 * (band / max(bands - 1, 1))
        table = bytes(int(v * factor) for v in range(256))
        scanline = b"\x00" + base_row.translate(table)  # filter type 0: the bytes as they are
        parts.append(compressor.compress(scanline * (last - first)))
    parts.append(compressor.flush())

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"".join((
        b"\x89PNG\r\n\x1a\n",
        _png_chunk(b"IHDR", header),
        _png_chunk(b"IDAT", b"".join(parts)),
        _png_chunk(b"IEND", b""),
    ))


# ---------------------------------------------------------------- speech

# About the pace of read-aloud speech (roughly 15 characters a second) at speed 1.0.
_SECONDS_PER_CHAR = 0.065
_AMPLITUDE = 0.3 * 32767
_FADE_SECONDS = 0.005
MIN_SPEED, MAX_SPEED = 0.25, 4.0


def _check_speech_args(speed: float, sample_rate: int) -> None:
    if not isinstance(speed, (int, float)) or not (MIN_SPEED <= speed <= MAX_SPEED):
        raise ValueError(f"speed must be between {MIN_SPEED} and {MAX_SPEED}")
    if not isinstance(sample_rate, int) or not (8000 <= sample_rate <= 96000):
        raise ValueError("sample_rate must be an integer between 8000 and 96000")


def _samples(text: str, voice: str, speed: float, sample_rate: int) -> array.array:
    """16-bit samples: one tone per character, silence for whitespace.

    The voice picks the base pitch and how much of the second harmonic is mixed in; the
    character picks the step above the base pitch. Each distinct character's tone is computed
    once and reused, so a 4096-character input costs a few dozen sine tables, not millions
    of sin() calls.
    """
    _check_speech_args(speed, sample_rate)
    voice_bytes = digest("voice", voice)
    base_pitch = 110 + voice_bytes[0] / 255 * 150  # 110-260 Hz
    overtone = 0.15 + voice_bytes[1] / 255 * 0.35
    segment = max(1, round(sample_rate * _SECONDS_PER_CHAR / speed))
    fade = min(segment // 2, max(1, round(sample_rate * _FADE_SECONDS)))
    envelope = [min(1.0, i / fade, (segment - 1 - i) / fade) for i in range(segment)]
    silence = array.array("h", bytes(2 * segment))

    tones: dict[str, array.array] = {}
    out = array.array("h")
    for char in text or " ":  # an empty text still gives one segment of silence
        if char.isspace():
            out.extend(silence)
            continue
        tone = tones.get(char)
        if tone is None:
            # Pentatonic-ish steps keep neighbouring characters from sounding alike.
            step = (ord(char) * 7) % 24
            frequency = base_pitch * 2 ** (step / 12)
            w = 2 * math.pi * frequency / sample_rate
            tone = array.array("h", (
                int(_AMPLITUDE * envelope[i] * (math.sin(w * i) + overtone * math.sin(2 * w * i)) / (1 + overtone))
                for i in range(segment)
            ))
            tones[char] = tone
        out.extend(tone)
    if sys.byteorder != "little":  # WAV and the PCM format are little-endian
        out.byteswap()
    return out


def synthesize_pcm(text: str, *, voice: str, speed: float = 1.0, sample_rate: int = 24000) -> bytes:
    """Raw signed 16-bit little-endian mono samples (OpenAI's `pcm` format is 24 kHz)."""
    _check_speech_args(speed, sample_rate)
    return event_loop.run(_pcm, _speech_cost(text, speed, sample_rate), text, voice, speed, sample_rate)


def synthesize_wav(text: str, *, voice: str, speed: float = 1.0, sample_rate: int = 24000) -> bytes:
    """A RIFF WAV file, 16-bit mono; about 65 ms per character at speed 1.0, shorter when faster."""
    _check_speech_args(speed, sample_rate)
    return event_loop.run(_wav, _speech_cost(text, speed, sample_rate), text, voice, speed, sample_rate)


def _speech_cost(text: str, speed: float, sample_rate: int) -> int:
    return int(max(len(text), 1) * sample_rate * _SECONDS_PER_CHAR / speed) // 40  # about 25 ns a sample


def _pcm(text: str, voice: str, speed: float, sample_rate: int) -> bytes:
    return _samples(text, voice, speed, sample_rate).tobytes()


def _wav(text: str, voice: str, speed: float, sample_rate: int) -> bytes:
    pcm = _pcm(text, voice, speed, sample_rate)
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(pcm)
    return buffer.getvalue()


# ---------------------------------------------------------------- embeddings

EMBEDDING_DIMENSIONS = 256
MAX_EMBEDDING_DIMENSIONS = 4096
# Whole words say the most, word pairs add order, character trigrams let "running" and "runner"
# share features. The weights are relative; the vector is normalised at the end.
_WORD_WEIGHT, _PAIR_WEIGHT, _TRIGRAM_WEIGHT = 1.0, 0.5, 0.3


def _features(text: str) -> dict[str, float]:
    """Each distinct feature of ``text`` with its weight times the times it occurs.

    Counted first, then hashed once each: hashing every occurrence made a text of one-letter words cost
    the gateway some ten times the CPU a chat request of its size does (three hashes for every two bytes).
    Counting the words and word pairs is done by Counter in C; trigrams are taken from each distinct word.
    """
    words = [w.lower() for w in _TOKEN_RE.findall(text)]
    weights: dict[str, float] = {}
    trigrams: Counter[str] = Counter()
    for word, count in Counter(words).items():
        weights["w:" + word] = count * _WORD_WEIGHT
        padded = f"<{word}>"
        grams = [padded[i:i + 3] for i in range(len(padded) - 2)]
        if count == 1:
            trigrams.update(grams)
        else:
            for gram in grams:
                trigrams[gram] += count
    for gram, count in trigrams.items():
        weights["c:" + gram] = count * _TRIGRAM_WEIGHT
    for pair, count in Counter(map("p:{} {}".format, words, words[1:])).items():
        weights[pair] = count * _PAIR_WEIGHT
    return weights


def embed(text: str, dimensions: int = EMBEDDING_DIMENSIONS) -> list[float]:
    """A fixed-size, L2-normalised vector of `text` by signed feature hashing.

    Each feature is hashed to a slot and a sign; the signs make unrelated features cancel on
    average instead of piling up, so the dot product approximates shared features. A text
    without any word or punctuation (empty or whitespace) has no features and gets the zero
    vector: there is no direction to give it, and a made-up unit vector would look similar to
    something.
    """
    if not isinstance(dimensions, int) or not (1 <= dimensions <= MAX_EMBEDDING_DIMENSIONS):
        raise ValueError(f"dimensions must be an integer between 1 and {MAX_EMBEDDING_DIMENSIONS}")
    return event_loop.run(_embed, len(text or "") + dimensions // 8, text, dimensions)


def _embed(text: str, dimensions: int) -> list[float]:
    vector = [0.0] * dimensions
    blake2b, from_bytes = hashlib.blake2b, int.from_bytes
    weights = _features(text or "")
    hashes = [from_bytes(blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
              for feature in weights]
    for hashed, weight in zip(hashes, weights.values()):
        vector[(hashed >> 1) % dimensions] += weight if hashed & 1 else -weight
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:
        return vector
    return [v / norm for v in vector]

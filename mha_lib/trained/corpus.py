"""The sentences of chapter 10, written for it, in one place.

Every measurement of the chapter runs on these sentences (and on what a student types into the explorer):

    CORPUS              every sentence below, in this order (about 50)
    COREFERENCE         sentences with a pronoun, the noun it refers to, and another noun it could have meant
    REPETITION          a word that comes back later in the sentence
    LISTS               enumerations with commas and "and"
    PLAIN               ordinary sentences of different lengths
    PARAPHRASE_PAIRS    pairs that say the same thing in other words (few: 72 ablations run on them live)
    UNRELATED_PAIRS     pairs on different topics, made from the paraphrase sentences (no extra sentences)

All words named in ``COREFERENCE`` occur once in their sentence and are one word piece each for the model's
tokenizer (``tests/trained/test_head_roles.py`` checks it), so "the weight of *it* on *animal*" is one number.
"""

from __future__ import annotations

from typing import NamedTuple


class Coreference(NamedTuple):
    sentence: str
    pronoun: str  # the word that refers back
    antecedent: str  # the noun it refers to
    distractor: str  # another noun of the sentence it could have referred to


COREFERENCE: tuple[Coreference, ...] = (
    Coreference("The animal didn't cross the street because it was too tired.", "it", "animal", "street"),
    Coreference("The animal didn't cross the road because it was too wide.", "it", "road", "animal"),
    Coreference("The trophy did not fit in the suitcase because it was too big.", "it", "trophy", "suitcase"),
    Coreference("Maria called her brother because she needed help with the move.", "she", "maria", "brother"),
    Coreference("The engineers praised the manager after he fixed the budget.", "he", "manager", "engineers"),
    Coreference("The dog chased the cat until it climbed a tree.", "it", "cat", "dog"),
    Coreference("The teacher thanked the students because they had cleaned the room.", "they", "students",
                "teacher"),
    Coreference("The bottle fell off the table and it broke into pieces.", "it", "bottle", "table"),
    Coreference("Anna gave the book to Tom because he wanted to read it.", "he", "tom", "anna"),
    Coreference("The farmers sold the apples because they were ripe.", "they", "apples", "farmers"),
    Coreference("My sister bought a car, but she rarely drives.", "she", "sister", "car"),
    Coreference("The river flooded the village after it rose all night.", "it", "river", "village"),
    Coreference("The boy asked his father for help because he could not find his keys.", "he", "boy", "father"),
    Coreference("The company hired the programmer because she knew the language.", "she", "programmer",
                "company"),
)

REPETITION: tuple[str, ...] = (
    "The cat saw another cat sitting on the wall.",
    "We walked to the market, and then we walked home again.",
    "A rose is a rose is a rose.",
    "The plan worked because the plan was simple.",
    "She said yes, and then she said yes again.",
    "Every morning the train is late, and every evening the train is late too.",
    "The door was open, so I closed the door.",
)

LISTS: tuple[str, ...] = (
    "We bought apples, pears, plums and cherries.",
    "The flag is red, white and blue.",
    "Monday, Tuesday, Wednesday, Thursday and Friday are work days.",
    "Bring a pen, a notebook, a ruler and a calculator.",
    "The recipe needs flour, sugar, eggs, butter and milk.",
    "One, two, three, four, five, six, seven.",
    "Paris, Rome, Madrid and Berlin are capitals.",
)

PLAIN: tuple[str, ...] = (
    "Attention lets every word look at every other word.",
    "The meeting was moved to Thursday afternoon.",
    "Small models can still learn useful patterns.",
    "He opened the window to let in some fresh air.",
    "The library closes at eight on weekdays.",
    "Rain is expected over the mountains tomorrow.",
    "Please turn off the lights when you leave.",
    "The children built a castle out of sand.",
    "The soup needs a little more salt.",
    "How do I reset my password?",
    "This phone has a very long battery life.",
    "He missed the bus and arrived late to work.",
)

PARAPHRASE_PAIRS: tuple[tuple[str, str], ...] = (
    ("The cat is sleeping on the sofa.", "A cat naps on the couch."),
    ("The concert was cancelled because of the storm.", "Bad weather made them call off the show."),
    ("She is learning to play the guitar.", "She takes guitar lessons."),
    ("The price of bread went up last month.", "Bread became more expensive last month."),
    ("The museum is closed on Mondays.", "You cannot visit the museum on a Monday."),
)


def _paraphrase_sentences() -> tuple[str, ...]:
    return tuple(s for pair in PARAPHRASE_PAIRS for s in pair)


PARAPHRASE_SENTENCES = _paraphrase_sentences()  # 2·P sentences: pair i is (2i, 2i + 1)
PARAPHRASE_INDEX_PAIRS = tuple((2 * i, 2 * i + 1) for i in range(len(PARAPHRASE_PAIRS)))
# unrelated: the first sentence of pair i with the second of pair i + 1 (different topics, similar length)
UNRELATED_INDEX_PAIRS = tuple((2 * i, 2 * ((i + 1) % len(PARAPHRASE_PAIRS)) + 1) for i in range(len(PARAPHRASE_PAIRS)))
UNRELATED_PAIRS = tuple((PARAPHRASE_SENTENCES[a], PARAPHRASE_SENTENCES[b]) for a, b in UNRELATED_INDEX_PAIRS)

CORPUS: tuple[str, ...] = (
    tuple(c.sentence for c in COREFERENCE) + REPETITION + LISTS + PLAIN + PARAPHRASE_SENTENCES
)

EXAMPLE_SENTENCE = COREFERENCE[0].sentence  # the chapter's running example

__all__ = [
    "COREFERENCE", "CORPUS", "Coreference", "EXAMPLE_SENTENCE", "LISTS", "PARAPHRASE_INDEX_PAIRS",
    "PARAPHRASE_PAIRS", "PARAPHRASE_SENTENCES", "PLAIN", "REPETITION", "UNRELATED_INDEX_PAIRS", "UNRELATED_PAIRS",
]

"""The facts the service ships with: short, true and checkable in any encyclopedia.

The list lives in the migration itself (not imported from app code) so this
step loads the same rows forever; staff edit, add or disable facts in the admin.
"""
from django.db import migrations

FACTS = {
    "science": [
        "Light from the Sun takes about 8 minutes and 20 seconds to reach Earth.",
        "The speed of light in a vacuum is exactly 299,792,458 metres per second, a value fixed by the "
        "definition of the metre.",
        "Helium is the second most abundant element in the observable universe, after hydrogen.",
        "Hydrogen is the lightest chemical element.",
        "A water molecule is made of two hydrogen atoms bonded to one oxygen atom.",
        "Diamond and graphite are both made entirely of carbon; they differ only in how the atoms are arranged.",
        "Sound travels through water at about 1,480 metres per second, more than four times faster than "
        "through air.",
        "Sound cannot travel through a vacuum: it needs a medium such as air, water or rock.",
        "An adult human skeleton usually has 206 bones.",
        "The femur, or thigh bone, is the longest bone in the human body.",
        "The stapes, in the middle ear, is the smallest bone in the human body.",
        "The skin is the largest organ of the human body.",
        "An adult human usually has 32 teeth, counting the four wisdom teeth.",
        "The human heart has four chambers: two atria and two ventricles.",
        "Mature human red blood cells have no nucleus.",
        "Mitochondria carry their own DNA, which humans inherit almost entirely from their mother.",
        "Most human cells hold 23 pairs of chromosomes.",
        "The cornea of the eye has no blood vessels; it takes most of its oxygen directly from the air.",
        "Octopuses have three hearts.",
        "Octopus blood is blue because it carries oxygen with haemocyanin, a copper-based protein.",
        "Tardigrades can survive years of complete drying out by curling into a dormant state called a tun.",
        "The blue whale is the largest animal alive today; adults can be more than 25 metres long.",
        "Bats are the only mammals capable of true, sustained flight.",
        "Honey bees tell each other the direction and distance of food with a movement called the waggle dance.",
        "An ostrich's eye is larger than its brain.",
        "Butterflies taste with sensors on their feet.",
        "Sharks appear in the fossil record more than 400 million years ago, earlier than the first trees.",
        "Plants take in carbon dioxide and give off oxygen during photosynthesis.",
        "Leaves look green because chlorophyll absorbs mostly red and blue light and reflects green light.",
        "Bananas are slightly radioactive because they contain potassium, a small fraction of which is the "
        "isotope potassium-40.",
        "Earth's inner core is solid, while the outer core around it is liquid metal.",
        "Earth's atmosphere is about 78 percent nitrogen and 21 percent oxygen by volume.",
        "Argon makes up almost 1 percent of Earth's atmosphere, more than twenty times as much as carbon dioxide.",
        "Oxygen is the most abundant element in Earth's crust by mass.",
        "Earth is about 4.5 billion years old.",
        "Each whole step up the moment magnitude scale means roughly 32 times more energy released by an "
        "earthquake.",
        "A lightning bolt can heat the air around it to about 30,000 kelvin, roughly five times the temperature "
        "of the Sun's surface.",
        "The sky looks blue because air molecules scatter the shorter, blue wavelengths of sunlight more than "
        "the longer, red ones.",
        "Rainbows form because water droplets bend different colours of light by slightly different amounts.",
        "Ice floats because it is less dense than liquid water.",
        "Water expands by about 9 percent when it freezes.",
        "Liquid water is densest at about 4 °C.",
        "Absolute zero, 0 kelvin, is equal to -273.15 °C.",
        "Pure water has a pH of 7 at 25 °C.",
        "At room temperature and normal pressure, bromine and mercury are the only elements that are liquid.",
        "Gallium melts at about 29.8 °C, so a piece of it can melt in a warm hand.",
        "Table salt is the compound sodium chloride, NaCl.",
        "The chemical symbol for gold, Au, comes from its Latin name, aurum.",
        "The chemical symbol for iron, Fe, comes from its Latin name, ferrum.",
        "The chemical symbol for sodium, Na, comes from its Latin name, natrium.",
        "Ordinary window glass is made mostly of silica, the compound silicon dioxide.",
        "Stainless steel resists rust because it contains at least about 10.5 percent chromium, which forms a "
        "thin protective oxide layer.",
        "Electrons carry a negative charge, protons a positive charge, and neutrons no charge at all.",
        "Protons and neutrons are each made of three quarks.",
        "Carbon-14 has a half-life of about 5,730 years, which lets radiocarbon dating reach back around "
        "50,000 years.",
        "Since 2019 the kilogram has been defined by fixing the value of the Planck constant.",
        "Isaac Newton published his laws of motion and of universal gravitation in the Principia in 1687.",
        "Albert Einstein published his theory of special relativity in 1905.",
        "Marie Curie was the first person to win Nobel Prizes in two different sciences: physics in 1903 and "
        "chemistry in 1911.",
        "Dmitri Mendeleev published his periodic table in 1869, leaving gaps for elements not yet discovered.",
        "The double-helix structure of DNA was described by James Watson and Francis Crick in 1953, drawing on "
        "X-ray images made by Rosalind Franklin and Raymond Gosling.",
        "Alexander Fleming noticed in 1928 that a Penicillium mould killed the bacteria around it, the discovery "
        "that led to penicillin.",
        "Insulin was first isolated and used to treat diabetes in 1921 and 1922 by a team in Toronto that "
        "included Frederick Banting and Charles Best.",
        "The word vaccine comes from the Latin vacca, cow, after Edward Jenner's use of cowpox to protect "
        "against smallpox.",
        "Smallpox was the first human disease to be eradicated; the World Health Assembly declared it gone "
        "in 1980.",
        "The Sun holds about 99.8 percent of all the mass in the Solar System.",
        "The Sun is about 109 times as wide as Earth.",
        "Jupiter is more than twice as massive as all the other planets of the Solar System combined.",
        "Saturn's average density is lower than that of water.",
        "Venus is the hottest planet in the Solar System, even though Mercury is closer to the Sun, because its "
        "thick carbon dioxide atmosphere traps heat.",
        "Venus spins in the opposite direction to most planets, so on Venus the Sun rises in the west.",
        "A full rotation of Venus takes about 243 Earth days, longer than its 225-day orbit around the Sun.",
        "Ganymede, a moon of Jupiter, is larger than the planet Mercury.",
        "Titan, Saturn's largest moon, has a thicker atmosphere than Earth and lakes of liquid methane and ethane.",
        "Mars has two small moons, Phobos and Deimos.",
        "Olympus Mons on Mars rises about 22 kilometres, roughly two and a half times the height of Mount "
        "Everest above sea level.",
        "The Moon moves about 3.8 centimetres farther from Earth every year.",
        "The same side of the Moon always faces Earth because the Moon turns once on its axis in the same time "
        "it takes to orbit Earth.",
        "Earth's seasons come from the roughly 23.4-degree tilt of its axis, not from changes in its distance "
        "from the Sun.",
        "Earth is closest to the Sun in early January.",
        "A light-year is a distance, not a time: about 9.46 trillion kilometres.",
        "Proxima Centauri, about 4.2 light-years away, is the nearest known star to the Sun.",
        "Neptune was found in 1846 at a position predicted mathematically from irregularities in the orbit "
        "of Uranus.",
        "Pluto was reclassified as a dwarf planet by the International Astronomical Union in 2006.",
        "Voyager 1, launched in 1977, became the first spacecraft to reach interstellar space, in 2012.",
        "The International Space Station circles Earth roughly every 90 minutes.",
    ],
    "geography": [
        "The Pacific is the largest and deepest of Earth's oceans.",
        "The Challenger Deep in the Mariana Trench, nearly 11 kilometres below sea level, is the deepest known "
        "point of the oceans.",
        "Mount Everest, at 8,849 metres, is the highest mountain above sea level.",
        "Measured from its base on the sea floor, Mauna Kea in Hawaii is taller than Mount Everest.",
        "Because Earth bulges at the equator, the summit of Chimborazo in Ecuador is the point on the surface "
        "farthest from Earth's centre.",
        "The shores of the Dead Sea, more than 400 metres below sea level, are the lowest dry land on Earth.",
        "Russia is the largest country in the world by area.",
        "Vatican City is the smallest country in the world by area.",
        "Canada has the longest coastline of any country.",
        "Russia spans eleven time zones.",
        "China uses a single time zone for the whole country, although it spans about five geographical ones.",
        "The Sahara is the largest hot desert on Earth; Antarctica, a cold desert, is larger still.",
        "The Atacama Desert in northern Chile is one of the driest places on Earth outside the poles.",
        "Antarctica's ice sheet holds roughly 70 percent of the world's fresh water.",
        "Lake Baikal in Siberia is the deepest lake in the world, more than 1,600 metres deep.",
        "Lake Baikal holds roughly a fifth of the world's unfrozen fresh surface water.",
        "The Caspian Sea is the largest inland body of water on Earth by area.",
        "Lake Superior is the largest of North America's Great Lakes by both area and volume.",
        "The Amazon carries more water than any other river, about a fifth of all the river water that reaches "
        "the oceans.",
        "Whether the Nile or the Amazon is the longest river depends on where their sources and mouths are taken "
        "to be.",
        "The Mississippi and Missouri together form the longest river system in North America.",
        "The Danube flows through or along the borders of ten countries, more than any other river.",
        "Angel Falls in Venezuela is the highest uninterrupted waterfall in the world, at 979 metres.",
        "Victoria Falls, on the border of Zambia and Zimbabwe, is known locally as Mosi-oa-Tunya, the smoke "
        "that thunders.",
        "The delta of the Ganges and Brahmaputra rivers is the largest river delta in the world.",
        "Istanbul lies on two continents, Europe and Asia, on either side of the Bosporus strait.",
        "The Strait of Gibraltar, which separates Europe from Africa, is less than 15 kilometres wide at its "
        "narrowest.",
        "The Panama Canal, opened in 1914, links the Atlantic and Pacific oceans.",
        "The Suez Canal, opened in 1869, links the Mediterranean Sea and the Red Sea.",
        "Greenland is the largest island in the world that is not a continent.",
        "Indonesia is made up of more than 17,000 islands.",
        "Japan's four largest islands are Honshu, Hokkaido, Kyushu and Shikoku.",
        "Ecuador takes its name from the equator, which crosses the country.",
        "La Paz in Bolivia, about 3,600 metres above sea level, is the highest seat of government in the world.",
        "Canberra was built as Australia's capital as a compromise between Sydney and Melbourne.",
        "Brasília was built from scratch as Brazil's capital and inaugurated in 1960.",
        "The Andes, about 7,000 kilometres long, are the longest continental mountain range in the world.",
        "The Himalayas are still rising as the Indian tectonic plate pushes into the Eurasian plate.",
        "Iceland sits on the Mid-Atlantic Ridge, where the North American and Eurasian plates move apart.",
        "Africa has more countries than any other continent: 54 are members of the United Nations.",
        "Mount Kilimanjaro in Tanzania, about 5,895 metres high, is the highest mountain in Africa.",
        "Aconcagua in Argentina, about 6,961 metres high, is the highest mountain outside Asia.",
        "Denali in Alaska, about 6,190 metres high, is the highest mountain in North America.",
        "Mont Blanc is the highest mountain of the Alps.",
        "The Great Barrier Reef off Queensland, Australia, is the largest coral reef system in the world.",
        "Mongolia is the most sparsely populated sovereign country in the world.",
        "About a quarter of the Netherlands lies below sea level, protected by dikes, dunes and pumps.",
        "Lesotho is entirely surrounded by South Africa.",
        "San Marino and Vatican City are both entirely surrounded by Italy.",
        "Liechtenstein and Uzbekistan are the only countries surrounded entirely by other landlocked countries.",
        "The Prime Meridian, longitude 0 degrees, runs through Greenwich in London.",
        "The International Date Line roughly follows the 180-degree meridian but bends around island groups so "
        "they share one date.",
        "Point Nemo in the South Pacific is the spot in the ocean farthest from land, about 2,700 kilometres "
        "from the nearest coast.",
    ],
    "history": [
        "The Great Pyramid of Giza was built for the pharaoh Khufu around 2560 BC.",
        "The Great Pyramid of Giza was the tallest structure built by humans for more than 3,800 years.",
        "Cleopatra VII lived closer in time to the first Moon landing than to the building of the Great Pyramid.",
        "Writing in cuneiform script developed in Mesopotamia more than 5,000 years ago.",
        "The Code of Hammurabi, from Babylon around 1750 BC, is one of the oldest written law codes known.",
        "Alexander the Great died in Babylon in 323 BC, at the age of 32.",
        "Julius Caesar was assassinated on the Ides of March, 15 March 44 BC.",
        "The Colosseum in Rome was completed in AD 80, under the emperor Titus.",
        "Building of Hadrian's Wall in northern England began around AD 122.",
        "The Western Roman Empire is traditionally said to have ended in AD 476, when Romulus Augustulus was "
        "deposed.",
        "The Eastern Roman, or Byzantine, Empire lasted until the Ottomans took Constantinople in 1453.",
        "The Indian mathematician Brahmagupta set out rules for calculating with zero in AD 628.",
        "The Battle of Hastings in 1066 began the Norman conquest of England.",
        "King John of England sealed Magna Carta in 1215.",
        "The Mongol Empire of the 13th century was the largest contiguous land empire in history.",
        "The Black Death reached Europe in 1347 and killed between a third and a half of its people within a few "
        "years.",
        "The Hundred Years' War between England and France lasted 116 years, from 1337 to 1453.",
        "Johannes Gutenberg was printing with movable metal type in Mainz by around 1450.",
        "Machu Picchu was built by the Inca in the 15th century.",
        "Christopher Columbus first reached the Americas in 1492.",
        "The first voyage around the world was completed in 1522 by the expedition Ferdinand Magellan had led; "
        "Magellan himself was killed in the Philippines in 1521.",
        "Pope Gregory XIII introduced the Gregorian calendar in 1582, dropping ten days from that October.",
        "Great Britain and its colonies switched to the Gregorian calendar in 1752, skipping 11 days of September.",
        "The Peace of Westphalia in 1648 ended the Thirty Years' War.",
        "Most of the Great Wall of China that stands today was built during the Ming dynasty.",
        "The Great Wall of China is not one wall but many, built and rebuilt by different dynasties over about "
        "two thousand years.",
        "James Watt did not invent the steam engine; he made Thomas Newcomen's design far more efficient with a "
        "separate condenser, patented in 1769.",
        "The United States Declaration of Independence was adopted on 4 July 1776.",
        "France's national day, 14 July, marks the storming of the Bastille in 1789.",
        "The Rosetta Stone, found in 1799, carries one decree in hieroglyphs, Demotic script and ancient Greek.",
        "Jean-François Champollion announced his decipherment of Egyptian hieroglyphs in 1822.",
        "Napoleon was finally defeated at the Battle of Waterloo in 1815, in what is now Belgium.",
        "The oldest surviving photograph taken with a camera was made by Nicéphore Niépce around 1826.",
        "The first transatlantic telegraph cable was completed in 1858 but stopped working within weeks.",
        "Abraham Lincoln's Emancipation Proclamation took effect on 1 January 1863.",
        "The Meiji Restoration of 1868 began Japan's rapid modernisation.",
        "Alexander Graham Bell was granted a patent for the telephone in 1876.",
        "The Statue of Liberty, a gift from the people of France, was dedicated in New York in 1886.",
        "The Eiffel Tower was built for the 1889 World's Fair in Paris.",
        "In 1893 New Zealand became the first self-governing country to give women the vote in national "
        "elections.",
        "The first modern Olympic Games were held in Athens in 1896.",
        "The Wright brothers made the first controlled, powered aeroplane flights near Kitty Hawk, North Carolina, "
        "in December 1903.",
        "The Wright brothers' first flight lasted 12 seconds and covered about 37 metres.",
        "The Titanic sank in April 1912, on its maiden voyage, after striking an iceberg.",
        "The First World War lasted from 1914 to 1918.",
        "The Ottoman Empire lasted from around 1299 until the sultanate was abolished in 1922.",
        "Charles Lindbergh made the first solo non-stop flight across the Atlantic in 1927.",
        "The Second World War ended in Europe on 8 May 1945 and in Asia with Japan's formal surrender on "
        "2 September 1945.",
        "The United Nations Charter came into force on 24 October 1945, the date now marked as United Nations Day.",
        "India became independent from British rule on 15 August 1947.",
        "Jonas Salk's polio vaccine was announced safe and effective in 1955.",
        "Sputnik 1, launched by the Soviet Union in 1957, was the first artificial satellite.",
        "Yuri Gagarin became the first human in space on 12 April 1961.",
        "Valentina Tereshkova became the first woman in space in 1963.",
        "Christiaan Barnard performed the first human heart transplant in Cape Town in 1967.",
        "Neil Armstrong and Buzz Aldrin landed on the Moon on 20 July 1969, during Apollo 11.",
        "The Berlin Wall was opened on 9 November 1989.",
        "Tim Berners-Lee proposed the World Wide Web at CERN in 1989.",
        "Nelson Mandela was released from prison in 1990 and became South Africa's president in 1994.",
        "The Soviet Union was dissolved in December 1991.",
        "The euro was introduced for accounting in 1999 and as notes and coins in 2002.",
    ],
    "maths": [
        "Pi is irrational: its decimal expansion never ends and never repeats.",
        "The ratio of any circle's circumference to its diameter is the same number, pi.",
        "The square root of 2 is irrational.",
        "There are infinitely many prime numbers, as Euclid proved more than 2,000 years ago.",
        "2 is the only even prime number.",
        "1 is not a prime number: a prime has exactly two distinct positive divisors.",
        "There are 25 prime numbers below 100.",
        "Every prime number greater than 3 is one more or one less than a multiple of 6.",
        "Every whole number greater than 1 can be written as a product of primes in exactly one way, apart from "
        "the order of the factors.",
        "The largest known prime number is a Mersenne prime, a number of the form 2^p - 1.",
        "The angles of any triangle drawn on a flat surface add up to 180 degrees.",
        "The interior angles of a hexagon add up to 720 degrees.",
        "The angles around a point add up to 360 degrees.",
        "In a right-angled triangle, the square of the hypotenuse equals the sum of the squares of the other two "
        "sides.",
        "3, 4, 5 is the smallest right-angled triangle with whole-number sides.",
        "Equilateral triangles, squares and regular hexagons are the only regular polygons that can tile a flat "
        "surface on their own.",
        "There are exactly five Platonic solids: the tetrahedron, cube, octahedron, dodecahedron and icosahedron.",
        "For any convex polyhedron, the number of vertices minus edges plus faces is always 2.",
        "A Möbius strip has only one side and one edge.",
        "Zero factorial, 0!, equals 1.",
        "Any non-zero number raised to the power 0 equals 1.",
        "A googol is 10 to the power 100.",
        "The number of different orders of a 52-card deck, 52!, has 68 digits.",
        "The Fibonacci sequence begins 0, 1, 1, 2, 3, 5, 8, 13, and each term is the sum of the two before it.",
        "The ratio of consecutive Fibonacci numbers gets ever closer to the golden ratio, about 1.618.",
        "In each row of Pascal's triangle, every number is the sum of the two numbers above it.",
        "In a group of 23 people, the chance that at least two share a birthday is just over 50 percent.",
        "The number e, the base of natural logarithms, is about 2.71828.",
        "Euler's identity, e^(i*pi) + 1 = 0, links the numbers e, i, pi, 1 and 0.",
        "6 is the smallest perfect number: it equals the sum of its proper divisors, 1 + 2 + 3.",
        "28 is a perfect number: 1 + 2 + 4 + 7 + 14 = 28.",
        "1729 is the smallest number that is a sum of two cubes in two different ways: 1^3 + 12^3 and "
        "9^3 + 10^3.",
        "The sum of the first n odd numbers is n squared; for example 1 + 3 + 5 + 7 = 16.",
        "The whole numbers from 1 to 100 add up to 5050.",
        "A number is divisible by 3 exactly when the sum of its digits is divisible by 3.",
        "A number is divisible by 9 exactly when the sum of its digits is divisible by 9.",
        "The recurring decimal 0.999... is exactly equal to 1.",
        "The series 1/2 + 1/4 + 1/8 + ... adds up to exactly 1.",
        "The harmonic series 1 + 1/2 + 1/3 + 1/4 + ... grows without limit, even though its terms shrink "
        "towards zero.",
        "Georg Cantor proved that the real numbers cannot be listed one after another: there are more of them "
        "than there are whole numbers.",
        "Binary, the base-2 system computers use, writes every number with only the digits 0 and 1.",
        "A year is a leap year if it is divisible by 4, except century years not divisible by 400; so 2000 was "
        "a leap year and 1900 was not.",
        "Fermat's Last Theorem was proved by Andrew Wiles; the complete proof was published in 1995.",
        "The Four Colour Theorem, proved in 1976 by Kenneth Appel and Wolfgang Haken with the help of a "
        "computer, says four colours suffice for any flat map.",
        "The Riemann hypothesis, stated in 1859, is still unproved and is one of the Millennium Prize Problems.",
        "Grigori Perelman proved the Poincaré conjecture, a Millennium Prize Problem, and declined the prize.",
        "The word algorithm comes from the name of al-Khwarizmi, a 9th-century Persian mathematician.",
        "The word algebra comes from al-jabr, in the title of a 9th-century book by al-Khwarizmi.",
        "The equals sign was introduced by the Welsh mathematician Robert Recorde in 1557.",
    ],
}


def load_facts(apps, schema_editor):
    Fact = apps.get_model("utils_app", "Fact")
    Fact.objects.bulk_create(
        [Fact(text=text, topic=topic) for topic, texts in FACTS.items() for text in texts],
        ignore_conflicts=True,  # a fact staff already added by hand stays as it is
    )


def unload_facts(apps, schema_editor):
    Fact = apps.get_model("utils_app", "Fact")
    Fact.objects.filter(text__in=[text for texts in FACTS.values() for text in texts]).delete()


class Migration(migrations.Migration):
    dependencies = [("utils_app", "0001_initial")]

    operations = [migrations.RunPython(load_facts, unload_facts)]
